from coreepi.cli.main import main

main()
