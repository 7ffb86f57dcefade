"""The echo kind's service side: its models, store, fleet side, counters and API route."""
