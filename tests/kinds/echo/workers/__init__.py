"""The echo kind's workers' side: its run context and its JobKind."""
