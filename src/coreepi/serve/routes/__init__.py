"""The API's routes, one small module per concern; each handler checks its
input, calls one library function through the app's store gateway, and
shapes the answer."""
