"""`python -m service`: the tunefleet CLI."""

from service.cli import main

main()
