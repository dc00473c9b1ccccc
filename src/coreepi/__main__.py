from coreepi.cli.entry import main

main()
