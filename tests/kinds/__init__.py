"""Job kinds that exist only for the tests: each is a slice built the way docs/architecture.md, "Adding a
kind", says, registered with the `kinds` setting and nowhere else."""
