"""`python -m service`: the tunefleet CLI."""

from service.cli.main import main

main()
