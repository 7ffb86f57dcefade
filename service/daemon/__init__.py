"""The daemon: one per fleet; registers tunings, enqueues and reconciles, reaps, serves the API."""
