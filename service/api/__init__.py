"""The HTTP API and dashboard (front end): a Starlette app over the client."""
