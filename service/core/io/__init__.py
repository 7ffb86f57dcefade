"""The core's I/O machinery: Redis connections, batches and scripts, durable file writes, git, folder
work and serving. The domain contracts (models, keys, events, the store) sit one level up and use these."""
