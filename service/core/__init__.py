"""The core: what workers and every front end share (settings, errors, keys, models, the store, the
system repository, events, the Redis connection, health checks). It imports nothing outside itself."""
