"""The `tunefleet` command line (front end)."""
