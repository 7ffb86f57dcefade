"""The workers' side of each job kind, one folder per kind: its kind (load, pursue, end) and its run
context."""
