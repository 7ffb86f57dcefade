"""tunefleet's core and front end; as a library it configures no logging (see `service.logs`)."""

from service.logs import library_defaults

library_defaults()
