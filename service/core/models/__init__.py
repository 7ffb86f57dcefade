"""Typed models for every boundary: case files, store records, Redis payloads, jobs and HTTP bodies."""
