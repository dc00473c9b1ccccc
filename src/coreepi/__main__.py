from coreepi.cli import main

main()
