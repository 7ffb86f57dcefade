"""A tuning's versions for people (issue 52): every published version and rejected candidate with where
it came from and how it fared (`read`), the diff between two of them and the reasons behind one, each name
resolved against the tuning's own versions before git sees it (`names`); shown by `tunefleet versions`,
`diff` and `why` (`cli`), over HTTP (`api`) and in the client (service.client.versions)."""
