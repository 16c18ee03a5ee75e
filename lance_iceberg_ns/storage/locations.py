"""Table locations: normalized once, confined to the storage root and the allowed locations.

A location is compared, stored and handed to Lance in one normal form, so that what was checked
is what gets opened:

* local paths are absolute, without ``.``/``..`` segments, repeated or trailing slashes;
  ``file://`` URIs are percent-decoded first (Lance decodes them: ``%2e%2e`` is ``..``) and become
  plain paths;
* object-store URIs keep their scheme (lower case; ``s3a``/``s3n`` are ``s3``) and bucket (lower
  case), their path percent-decoded with ``.``/``..`` resolved and no trailing slash.

A table location must lie strictly under the root or one of the allowed locations; anything else
is ``PermissionDeniedError``. Local locations are also checked after resolving symbolic links, so a
link under the root cannot lead outside it. A bridge given neither (the catalog places its tables,
``location_mode=catalog``) takes the locations the catalog's entries name wherever they are: the
ownership marker alone shows what is a table's own. A location a caller asks for is then refused,
having nothing to lie under.

A register may also name its dataset relative to the namespace's own directory under the root
(``relative_location``), as Lance's directory namespace takes a location relative to its root.
"""

from __future__ import annotations

import os
import pathlib
import re
import uuid
from dataclasses import dataclass
from urllib.parse import quote, unquote

from lance_namespace.errors import InvalidInputError, PermissionDeniedError

_CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")
_SCHEME_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}
TABLE_DIRECTORY_SUFFIX = ".lance"
_URI_SAFE = "-_.~!$&'()*+,;=:@"  # what stays unescaped in an object-store path segment


def is_local(location: str) -> bool:
    """True for a location on this machine: a path (as ``normalize_location`` gives every local
    location, even one whose names hold ``://``) or a ``file://`` URI."""
    match = _SCHEME_PREFIX.match(location)
    return match is None or match.group(1).lower() == "file"


def is_relative(location: str) -> bool:
    """True for a location that is neither a URI nor an absolute path (``name.lance``,
    ``dir/name.lance``): a register resolves it against its namespace's directory."""
    return not (_SCHEME_PREFIX.match(location) or location.startswith("/") or location[:5].lower() == "file:")


def local_path(location: str) -> str:
    """The path on this machine of a local location: a path as it is, a ``file://`` URI as Lance
    reads it (percent-decoded, ``localhost`` or no host). Raises ``InvalidInputError`` for a
    ``file://`` URI of another host."""
    return normalize_location(location) if is_local(location) and _SCHEME_PREFIX.match(location) else location


def table_uri(location: str) -> str:
    """A complete URI for a location (``file://`` for local paths, escaped: a name such as
    ``%2e%2e`` stays a name when a client decodes the URI)."""
    if _SCHEME_PREFIX.match(location):
        return location
    return pathlib.Path(os.path.abspath(location)).as_uri()


def _resolved_segments(path: str, original: str) -> list[str]:
    """``a/./b/../c`` → ``["a", "c"]``; a ``..`` above the top leaves every allowed place."""
    segments: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            if not segments:
                raise PermissionDeniedError(f"The location {original!r} leaves its file system or bucket")
            segments.pop()
        else:
            segments.append(segment)
    return segments


def _decoded(text: str, original: str) -> str:
    try:
        decoded = unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise InvalidInputError(f"A table location has a percent-escape that is not UTF-8: {original!r}") from None
    if _CONTROL_CHARACTERS.search(decoded):
        raise InvalidInputError("A table location must not contain control characters")
    return decoded


def normalize_location(raw: str) -> str:
    """The normal form of a location (see the module docstring). Raises ``InvalidInputError`` for
    what is not an absolute location, ``PermissionDeniedError`` for a path that climbs above its top."""
    if not isinstance(raw, str) or not raw.strip():
        raise InvalidInputError("A table location must be a non-empty string")
    if raw != raw.strip() or _CONTROL_CHARACTERS.search(raw):
        raise InvalidInputError("A table location must not contain control characters or surrounding spaces")
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError("A table location must be valid Unicode text") from None
    match = _SCHEME.match(raw)
    if match is None:
        if raw[:5].lower() == "file:":  # file:/abs/path
            return _local_path(_decoded(raw[len("file:") :], raw), raw)
        return _local_path(raw, raw)
    scheme, rest = match.group(1).lower(), match.group(2)
    if "@" in rest.partition("/")[0]:  # a user or password: never echoed, never kept
        raise InvalidInputError(
            "A table location must not carry a user or password (before '@'): give credentials as storage options"
        )
    if "?" in rest or "#" in rest:
        raise InvalidInputError(f"A table location must not carry a query or a fragment: {raw!r}")
    if scheme == "file":
        host, _, path = rest.partition("/")
        if host.lower() not in ("", "localhost"):
            raise InvalidInputError(f"A file:// location must be on this host: {raw!r}")
        return _local_path("/" + _decoded(path, raw), raw)
    bucket, _, path = rest.partition("/")
    if not bucket:
        raise InvalidInputError(f"An object-store location needs a bucket: {raw!r}")
    segments = _resolved_segments(_decoded(path, raw), raw)
    scheme = _SCHEME_ALIASES.get(scheme, scheme)
    # Lance decodes an object-store URI once: every segment is encoded once, so it means itself
    return "/".join([f"{scheme}://{bucket.lower()}", *(encoded_segment(segment) for segment in segments)])


def encoded_segment(name: str) -> str:
    """A path segment (an object key's part, as the store lists it) as a normal location spells it."""
    return quote(name, safe=_URI_SAFE)


def _local_path(path: str, original: str) -> str:
    if not path.startswith("/"):
        raise InvalidInputError(f"A table location must be an absolute path or a URI, not {original!r}")
    return "/" + "/".join(_resolved_segments(path, original))


def store_top(location: str) -> str:
    """The top of the file system or bucket that holds a normalized ``location``: ``/``, or
    ``scheme://bucket``."""
    match = _SCHEME.match(location)
    if match is None:
        return "/"
    return f"{match.group(1)}://{match.group(2).partition('/')[0]}"


def is_inside(location: str, base: str) -> bool:
    """True when normalized ``location`` lies strictly under normalized ``base``."""
    return location.startswith(base.rstrip("/") + "/")


def overlaps(first: str, second: str) -> bool:
    """Equal, or one inside the other (both normalized)."""
    return first == second or is_inside(first, second) or is_inside(second, first)


@dataclass(frozen=True)
class LocationPolicy:
    """Where this bridge may put, read and delete table data: under ``root`` or an allowed location;
    anywhere the catalog places tables when it has neither (``confined`` is then False)."""

    root: str | None
    allowed: tuple[str, ...] = ()

    @classmethod
    def of(cls, root: str | None, allowed: tuple[str, ...] | list[str] = ()) -> LocationPolicy:
        return cls(
            normalize_location(root) if root else None, tuple(normalize_location(place) for place in allowed if place)
        )

    @property
    def bases(self) -> tuple[str, ...]:
        return (self.root, *self.allowed) if self.root else self.allowed

    @property
    def confined(self) -> bool:
        """Whether table locations must lie under a root or an allowed location."""
        return bool(self.bases)

    def confine(self, raw: str) -> str:
        """The normal form of ``raw``, if it lies strictly under the root or an allowed location
        (anywhere, when the policy has neither). Raises ``PermissionDeniedError`` otherwise (and
        ``InvalidInputError`` for a non-location)."""
        location = normalize_location(raw)
        if not self.confined:
            return location
        base = self.base_of(location)
        if base is None:
            kind = "paths" if is_local(location) else "URIs"  # the reference's words, which clients look for
            raise PermissionDeniedError(
                f"Absolute {kind} are not allowed outside the storage root and the allowed locations: "
                f"the location {location!r} is outside them"
            )
        if is_local(location) and not self._really_inside(location, base):
            raise PermissionDeniedError(f"The location {location!r} leads outside {base!r} through a symbolic link")
        return location

    def confine_requested(self, raw: str) -> str:
        """A location a caller asked for (declare, register), confined. Under the root, which the
        bridge lays out itself, it must also be a table directory of that layout (a name ending in
        ``.lance`` inside a warehouse directory), so it can never hold a warehouse or namespace
        directory that other tables' default locations will need. A local one must not pass
        through a symbolic link below its root or allowed location: by a link, one place has two
        spellings, and what the bridge knows of the place (whose marker, which entry holds it) is
        by its spelling. Raises ``PermissionDeniedError``."""
        if not self.confined:
            raise PermissionDeniedError(
                f"A table location {normalize_location(raw)!r} was asked for, but this bridge has no storage root and "
                "no allowed locations (the catalog places its tables): give root or allowed_locations to place "
                "tables yourself"
            )
        location = self.confine(raw)
        base = self.base_of(location)
        if base is not None and is_local(location) and self._through_a_link(location, base):
            raise PermissionDeniedError(
                f"The location {location!r} goes through a symbolic link below {base!r}: a table is declared or "
                "registered at the place itself, never by way of a link (which may lead into another table)"
            )
        if self.root and base == self.root:
            below = location[len(self.root) + 1 :].split("/")
            if len(below) < 2 or not below[-1].endswith(TABLE_DIRECTORY_SUFFIX):
                raise PermissionDeniedError(
                    f"Under the storage root a table location is {self.root}/<warehouse>/.../<name>"
                    f"{TABLE_DIRECTORY_SUFFIX}; {location!r} could hold other tables' directories "
                    "(use allowed_locations for a layout of your own)"
                )
        return location

    def base_of(self, location: str) -> str | None:
        """The root or allowed location that holds normalized ``location`` (the deepest), if any."""
        holders = [base for base in self.bases if is_inside(location, base)]
        return max(holders, key=len) if holders else None

    @staticmethod
    def _through_a_link(location: str, base: str) -> bool:
        """Whether a local ``location`` under ``base`` passes through a symbolic link below it (its
        own name included): its real path is not the base's real path and the same names."""
        try:
            spelled = os.path.join(os.path.realpath(base), os.path.relpath(location, base))
            return os.path.realpath(location) != os.path.normpath(spelled)
        except (OSError, ValueError):  # a loop of links, say
            return True

    @staticmethod
    def _really_inside(location: str, base: str) -> bool:
        try:
            return is_inside(os.path.realpath(location), os.path.realpath(base))
        except OSError:  # a loop of links, say
            return False

    def default_location(self, parts: list[str]) -> str:
        """A new location for a table ``[warehouse, ns..., name]``:
        ``{root}/{warehouse}/{ns...}/{name}-{8 hex}.lance``. The suffix makes it unique, so a name
        used again after a rename or a drop never meets the old table's data; the ``.lance`` ending
        keeps it apart from namespace directories, whose names never contain a dot. Names are
        escaped in object-store URIs, and the result is confined like any other location."""
        *namespace, name = parts
        directory = self._joined(self._required_root(), namespace)
        return self.confine(self._joined(directory, [f"{name}-{uuid.uuid4().hex[:8]}{TABLE_DIRECTORY_SUFFIX}"]))

    def namespace_directory(self, namespace: list[str]) -> str:
        """Where ``default_location`` puts the tables of namespace ``[warehouse, ns...]``:
        ``{root}/{warehouse}/{ns...}``, normalized."""
        return normalize_location(self._joined(self._required_root(), namespace))

    def _required_root(self) -> str:
        """The root, for what is laid out under it; InvalidInputError when there is none."""
        if self.root is None:
            raise InvalidInputError(
                "This bridge has no storage root (the catalog places its tables): give root to place tables, or "
                "relative locations, under it"
            )
        return self.root

    def relative_location(self, namespace: list[str], relative: str) -> str:
        """``relative`` (``name.lance``, ``dir/name.lance``: names joined by single slashes)
        resolved against the namespace's directory, so the last part of a location the bridge
        handed out names it again. Raises ``InvalidInputError`` for an empty or ``..`` part, or a
        result outside that directory (an object store decodes ``%2e%2e`` to ``..``); the result
        is not yet confined."""
        if any(part in ("", "..") for part in relative.split("/")):
            raise InvalidInputError(
                f"Path traversal is not allowed: a relative location names a place under its namespace's "
                f"directory, without '..' or empty parts: {relative!r}"
            )
        directory = self.namespace_directory(namespace)
        location = normalize_location(f"{directory}/{relative}")
        if not is_inside(location, directory):
            raise InvalidInputError(f"The relative location {relative!r} leaves its namespace's directory")
        return location

    @staticmethod
    def _joined(base: str, names: list[str]) -> str:
        """``base`` and names below it; names are escaped under an object-store base."""
        if not is_local(base):
            names = [quote(name, safe=_URI_SAFE) for name in names]
        return "/".join([base, *names])
