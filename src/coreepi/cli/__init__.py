"""cli: the ``coreepi`` command. Thin: each command is a library call."""
