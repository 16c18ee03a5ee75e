"""Tags and branches: names for versions of a dataset, kept by Lance in the dataset (``_refs/``).

A tag names a version and is not itself a version: it commits nothing, so a managed table's tags
need no catalog commit. A branch is a line of versions of its own; the catalog keeps one line per
managed table, so branches are refused there (the namespace says so before calling here).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote

import lance
from lance_namespace import (
    GetTableTagVersionResponse,
    ListTableBranchesResponse,
    ListTableTagsResponse,
)
from lance_namespace.errors import (
    InvalidInputError,
    TableBranchAlreadyExistsError,
    TableBranchNotFoundError,
    TableTagNotFoundError,
)
from lance_namespace_urllib3_client.models import BranchContents, TagContents

from lance_iceberg_ns.errors.pylance import RefKind, pylance_failures
from lance_iceberg_ns.paging import page_of

DEFAULT_PAGE_SIZE = 1000
# Lance keeps each tag and branch in a file named after it, its name percent-encoded twice (an "é" is
# "%25C3%25A9") and written first under a longer temporary name: past about 210 characters the
# file system refuses it, after Lance has made the branch's folders
MAX_REF_FILE_NAME = 200
_REF_PART = re.compile(r"[A-Za-z0-9._-]+")
M = TypeVar("M")


def _new_ref(name: str, kind: RefKind) -> str:
    """``name`` when a new tag or branch can be called so; InvalidInputError, before pylance makes
    anything, otherwise. (Refs that exist are looked up by name, whatever it is.)"""
    length = len(quote(quote(name, safe="-_."), safe="-_."))
    if length > MAX_REF_FILE_NAME:
        raise InvalidInputError(
            f"A {kind} name takes at most {MAX_REF_FILE_NAME} characters once percent-encoded, not {length}"
        )
    why = _ref_name_refused(name, kind)
    if why:
        raise InvalidInputError(f"{kind.capitalize()} name {name[:40]!r}: {why}")
    return name


def _ref_name_refused(name: str, kind: RefKind) -> str | None:
    """Why Lance's rules for ref names refuse ``name``, or None. Its "alphanumeric" is Unicode's,
    but a tag named with a letter outside ASCII is written under a file name it cannot read back,
    and every tag operation fails after it: letters and digits here are ASCII's."""
    if not name:
        return "it is empty"
    if name.endswith(".lock"):
        return "it may not end with '.lock'"
    if ".." in name:
        return "it may not hold '..'"
    parts = name.split("/") if kind == "branch" else [name]
    if "" in parts:
        return "its parts, between single '/', may not be empty"
    if not all(_REF_PART.fullmatch(part) for part in parts):
        return "it may hold only ASCII letters, digits, '.', '-', '_' (and '/' between the parts of a branch's)"
    if kind == "tag" and (name.startswith(".") or name.endswith(".")):
        return "it may not begin or end with '.'"
    if kind == "branch" and "." in parts:  # Lance allows it, and resolves the branch's path through it
        return "no part of it may be '.'"
    return None


def _existing(dataset: lance.LanceDataset, name: str, kind: RefKind) -> str:
    """``name`` when the dataset has that tag or branch; TableTagNotFoundError or
    TableBranchNotFoundError, before pylance is given a name it may not take, otherwise."""
    if kind == "tag" and name not in dataset.tags.list():
        raise TableTagNotFoundError(f"Tag {name[:40]!r} does not exist")
    if kind == "branch" and name not in dataset.branches.list():
        raise TableBranchNotFoundError(f"Branch {name[:40]!r} does not exist")
    return name


def _page(
    refs: Mapping[str, Any], page_token: str | None, limit: int | None, contents: Callable[[Mapping[str, Any]], M]
) -> tuple[dict[str, M], str | None]:
    """The refs (tags or branches) after ``page_token`` by name, at most ``limit``, each as
    ``contents`` makes it; the token of the next page, if any."""
    if limit is not None and limit < 0:
        raise InvalidInputError("limit must not be negative")
    names, token = page_of(refs, lambda name: name, page_token or None, limit or DEFAULT_PAGE_SIZE)
    return {name: contents(refs[name]) for name in names}, token


def _positive(version: int, operation: str) -> int:
    if version < 1:  # pylance reads 0 as "the latest": a tag names one version
        raise InvalidInputError(f"{operation}: the version must be a positive integer, got {version}")
    return version


def _reference(dataset: lance.LanceDataset, version: int, branch: str | None) -> int | tuple[str, int]:
    return (_existing(dataset, branch, "branch"), version) if branch else version


def list_tags(dataset: lance.LanceDataset, page_token: str | None, limit: int | None) -> ListTableTagsResponse:
    """A page of the tags, sorted by name, each with its version."""
    tags, token = _page(dataset.tags.list(), page_token, limit, _tag_contents)
    return ListTableTagsResponse(tags=tags, page_token=token)


def _tag_contents(tag: Mapping[str, Any]) -> TagContents:
    return TagContents.model_validate(
        {
            "branch": tag.get("branch"),
            "version": int(tag["version"]),
            "manifest_size": int(tag.get("manifest_size") or 0),
        }
    )


def tag_version(dataset: lance.LanceDataset, tag: str) -> GetTableTagVersionResponse:
    """The version a tag names. Raises TableTagNotFoundError."""
    with pylance_failures("get_table_tag_version"):
        found = dataset.tags.list().get(tag)
        if found is None:
            raise ValueError(f"Ref not found error: tag {tag} does not exist")
    return GetTableTagVersionResponse(version=int(found["version"]), branch=found.get("branch"))


def create_tag(dataset: lance.LanceDataset, tag: str, version: int, branch: str | None) -> None:
    """Name ``version`` (of ``branch``, else main) ``tag``. Raises TableTagAlreadyExistsError,
    TableVersionNotFoundError, InvalidInputError (a name Lance does not allow)."""
    with pylance_failures("create_table_tag"):
        dataset.tags.create(_new_ref(tag, "tag"), _reference(dataset, _positive(version, "create_table_tag"), branch))


def update_tag(dataset: lance.LanceDataset, tag: str, version: int, branch: str | None) -> None:
    """Move ``tag`` to ``version``. Raises TableTagNotFoundError, TableVersionNotFoundError."""
    with pylance_failures("update_table_tag"):
        tag = _existing(dataset, tag, "tag")  # checked first, as the reference does
        dataset.tags.update(tag, _reference(dataset, _positive(version, "update_table_tag"), branch))


def delete_tag(dataset: lance.LanceDataset, tag: str) -> None:
    """Remove ``tag`` (its version stays). Raises TableTagNotFoundError."""
    with pylance_failures("delete_table_tag"):
        dataset.tags.delete(_existing(dataset, tag, "tag"))


def list_branches(dataset: lance.LanceDataset, page_token: str | None, limit: int | None) -> ListTableBranchesResponse:
    """A page of the branches, sorted by name, each with where it started."""
    branches, token = _page(dataset.branches.list(), page_token, limit, _branch_contents)
    return ListTableBranchesResponse(branches=branches, page_token=token)


def _branch_contents(branch: Mapping[str, Any]) -> BranchContents:
    return BranchContents.model_validate(
        {
            "parent_branch": branch.get("parent_branch"),
            "parent_version": int(branch["parent_version"]),
            "create_at": int(branch["create_at"]),
            "manifest_size": int(branch.get("manifest_size") or 0),
            "metadata": dict(branch.get("metadata") or {}) or None,
        }
    )


def create_branch(dataset: lance.LanceDataset, name: str, from_branch: str | None, from_version: int | None) -> None:
    """Start branch ``name`` at ``from_version`` of ``from_branch`` (default: main's latest).
    Raises TableBranchAlreadyExistsError, TableVersionNotFoundError, InvalidInputError."""
    with pylance_failures("create_table_branch", refs="branch"):
        if _new_ref(name, "branch") in dataset.branches.list():  # pylance fails on a taken name with an internal error
            raise TableBranchAlreadyExistsError(f"Branch {name!r} already exists")
        if from_branch:
            _existing(dataset, from_branch, "branch")
        if from_version is not None:
            reference: Any = (from_branch, _positive(from_version, "create_table_branch"))
        else:
            reference = (from_branch, None) if from_branch else None
        dataset.create_branch(name, reference)


def delete_branch(dataset: lance.LanceDataset, name: str) -> None:
    """Remove branch ``name`` and the versions only it holds. Raises TableBranchNotFoundError."""
    with pylance_failures("delete_table_branch", refs="branch"):
        dataset.branches.delete(_existing(dataset, name, "branch"))
