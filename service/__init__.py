"""tunefleet's core and front end; as a library it configures no logging (see `service.core.logs`)."""

from service.core.logs import library_defaults

library_defaults()
