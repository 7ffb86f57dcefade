"""A version as a person names it, resolved against the tuning's own versions and candidates before git
sees it: `initial` (the version imported), `main` or `current` (the current version), or 4 to 40 hex digits
that begin exactly one of the tuning's rows (published, rejected or under gate). Anything else is refused
in one line: a name that begins with `-` (an option to git), holds `..` or a `/` (a range or a path), is not
hex, or names a commit that is not one of this tuning's versions (another tuning's, or an object of the
repository that is no version)."""

from __future__ import annotations

import re

from service.kinds.evals.errors import EvalError
from service.kinds.evals.history.models import VersionList, VersionRow

HEX_NAME = re.compile(r"^[0-9a-f]{4,40}$")
EXPECTED = "initial, main, or 4 to 40 hex digits of one of its versions or candidates"


class UnknownVersionError(EvalError):
    """A version name that names none of the tuning's versions and candidates."""


def resolve(found: VersionList, asked: str) -> VersionRow:
    """The row `asked` names (module docstring); UnknownVersionError naming it and what is expected."""
    rows = found.versions
    if asked == "initial":
        return next(row for row in rows if row.status == "initial")
    if asked in ("main", "current"):
        return next(row for row in rows if row.id == found.current)
    if not HEX_NAME.match(asked):
        shown = asked if len(asked) <= 60 else asked[:57] + "..."
        raise UnknownVersionError(
            f"tuning {found.tuning}: version {shown!r} is not a version name; expected {EXPECTED}"
        )
    matches = [row for row in rows if row.id.startswith(asked)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise UnknownVersionError(
            f"tuning {found.tuning}: version {asked!r} is none of its {len(rows)} versions and candidates; "
            f"expected {EXPECTED} (`tunefleet versions {found.tuning}` lists them)"
        )
    raise UnknownVersionError(
        f"tuning {found.tuning}: version {asked!r} begins {len(matches)} of its versions; give more digits"
    )
