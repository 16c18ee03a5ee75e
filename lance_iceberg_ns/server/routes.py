"""The Lance REST Namespace routes, as data: one entry per operation of the spec.

Every operation has the same shape: an identifier in the path (joined by the delimiter), some
request fields in the query string, the rest (if any) in a JSON body, and one namespace method to
call. Three operations carry Arrow IPC data as their body instead of JSON.

Operations are of two kinds: those answered from the Iceberg catalog (``CATALOG_OPERATIONS``,
milliseconds each) and the rest, which read or write Lance data and may take seconds; the server
runs the two kinds on separate worker threads (``capacity``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    operation: str  # the LanceNamespace method
    path: str
    query: tuple[str, ...] = ()  # request fields read from the query string
    method: str = "POST"
    json_body: bool = True  # False: no body
    arrow_body: bool = False  # the body is Arrow IPC data, passed to the method as bytes
    body_field: str | None = None  # the JSON body is this one field of the request, not the request
    response_field: str | None = None  # the answer is this one field of the response (as Lance clients read it)
    request_model: str | None = None  # when it is not <Operation>Request
    data_when: tuple[str, ...] = ()  # request fields that, when given, make a catalog operation open a dataset

    @property
    def model(self) -> str:
        """The request model in lance_namespace: ``describe_table`` → ``DescribeTableRequest``."""
        return self.request_model or "".join(word.title() for word in self.operation.split("_")) + "Request"

    @property
    def names_one_table(self) -> bool:
        """Whether the operation acts on the one existing table its path names (not a create)."""
        return self.path.startswith("/v1/table/{id}/") and self.operation not in TABLE_CREATIONS

    @property
    def answers_again(self) -> bool:
        """Whether a refusal found before anything was written lets the operation run once more
        (``answer_after_adopting``): not a version's commit, whose staged manifest the refusal deleted."""
        return self.operation != "create_table_version"

    @property
    def names_a_table(self) -> bool:
        """Whether the operation acts on the table its path names: an existing one, or one it makes."""
        return self.path.startswith("/v1/table/{id}/")

    @property
    def reads_or_writes_data(self) -> bool:
        """Whether the operation touches Lance data (every operation not known to be catalog-only)."""
        return self.operation not in CATALOG_OPERATIONS

    @property
    def only_reads(self) -> bool:
        """Whether the operation only reads data: stopped midway, it leaves nothing half done."""
        return self.operation in ONLY_READING

    def opens_data(self, request: object) -> bool:
        """Whether this request opens a dataset: every data operation's, and a catalog operation's
        that asks for what only the dataset knows (``data_when``: a field given, and not false)."""
        return self.reads_or_writes_data or any(
            getattr(request, name, None) not in (None, False) for name in self.data_when
        )


def listing(
    operation: str, path: str, *query: str, request_model: str | None = None, data_when: tuple[str, ...] = ()
) -> Route:
    """A GET listing: its request fields (pagination and such) in the query string, no body."""
    return Route(operation, path, query, "GET", False, request_model=request_model, data_when=data_when)


# Answered from the Iceberg catalog (describe_table opens a dataset only when asked for its version
# or schema, see Route.data_when); registering a table opens the dataset at the location a client
# names, dropping one for good deletes its files and restoring one writes a version: data.
CATALOG_OPERATIONS = frozenset(
    {
        "create_namespace",
        "list_namespaces",
        "describe_namespace",
        "drop_namespace",
        "namespace_exists",
        "list_tables",
        "declare_table",
        "describe_table",
        "table_exists",
        "deregister_table",
        "rename_table",
        "list_all_tables",
    }
)

# Data operations that only read (a query, a count): the work of one whose client went away may be
# stopped midway, as it changes nothing a later request could miss
ONLY_READING = frozenset({"query_table", "count_table_rows", "explain_table_query_plan", "analyze_table_query_plan"})

# Operations that make the table their path names: nothing is there to adopt versions of yet
TABLE_CREATIONS = frozenset({"create_table", "declare_table", "register_table"})

TABLE_LISTING = ("page_token", "limit", "include_declared")
DECLARED = ("include_declared",)  # a listing of declared tables looks for a dataset at each

ROUTES: tuple[Route, ...] = (
    # namespaces
    Route("create_namespace", "/v1/namespace/{id}/create"),
    listing("list_namespaces", "/v1/namespace/{id}/list", "page_token", "limit"),
    Route("describe_namespace", "/v1/namespace/{id}/describe"),
    Route("drop_namespace", "/v1/namespace/{id}/drop"),
    Route("namespace_exists", "/v1/namespace/{id}/exists"),
    listing("list_tables", "/v1/namespace/{id}/table/list", *TABLE_LISTING, data_when=DECLARED),
    # tables: catalog
    Route("declare_table", "/v1/table/{id}/declare", data_when=("location",)),  # is a dataset there?
    Route(
        "describe_table",
        "/v1/table/{id}/describe",
        ("with_table_uri", "load_detailed_metadata", "check_declared"),
        data_when=("load_detailed_metadata", "version", "check_declared"),
    ),
    Route("table_exists", "/v1/table/{id}/exists"),
    Route("drop_table", "/v1/table/{id}/drop", json_body=False),
    Route("deregister_table", "/v1/table/{id}/deregister"),
    Route("register_table", "/v1/table/{id}/register"),
    Route("rename_table", "/v1/table/{id}/rename"),
    Route("restore_table", "/v1/table/{id}/restore"),
    listing("list_all_tables", "/v1/table", *TABLE_LISTING, request_model="ListTablesRequest", data_when=DECLARED),
    # tables: data
    Route(
        "create_table",
        "/v1/table/{id}/create",
        ("mode", "properties", "storage_options"),
        json_body=False,
        arrow_body=True,
    ),
    Route("insert_into_table", "/v1/table/{id}/insert", ("branch", "mode"), json_body=False, arrow_body=True),
    Route(
        "merge_insert_into_table",
        "/v1/table/{id}/merge_insert",
        (
            "branch",
            "on",
            "when_matched_update_all",
            "when_matched_update_all_filt",
            "when_not_matched_insert_all",
            "when_not_matched_by_source_delete",
            "when_not_matched_by_source_delete_filt",
            "timeout",
            "use_index",
        ),
        json_body=False,
        arrow_body=True,
    ),
    Route("count_table_rows", "/v1/table/{id}/count_rows", response_field="count"),
    Route("update_table", "/v1/table/{id}/update"),
    Route("delete_from_table", "/v1/table/{id}/delete"),
    Route("query_table", "/v1/table/{id}/query"),
    Route("explain_table_query_plan", "/v1/table/{id}/explain_plan"),
    Route("analyze_table_query_plan", "/v1/table/{id}/analyze_plan"),
    Route("get_table_stats", "/v1/table/{id}/stats"),
    # tables: schema
    Route("alter_table_add_columns", "/v1/table/{id}/add_columns"),
    Route("alter_table_alter_columns", "/v1/table/{id}/alter_columns"),
    Route("alter_table_drop_columns", "/v1/table/{id}/drop_columns"),
    Route("alter_table_backfill_columns", "/v1/table/{id}/backfill_column"),
    Route("update_field_metadata", "/v1/table/{id}/update_field_metadata"),
    Route(
        "update_table_schema_metadata",
        "/v1/table/{id}/schema_metadata/update",
        ("branch",),
        body_field="metadata",
        response_field="metadata",
    ),
    # tables: indices
    Route("create_table_index", "/v1/table/{id}/create_index"),
    Route("create_table_scalar_index", "/v1/table/{id}/create_scalar_index", request_model="CreateTableIndexRequest"),
    Route("list_table_indices", "/v1/table/{id}/index/list"),
    Route("describe_table_index_stats", "/v1/table/{id}/index/{index_name}/stats"),
    Route("drop_table_index", "/v1/table/{id}/index/{index_name}/drop", ("branch",), json_body=False),
    # tables: versions, tags, branches
    Route(
        "list_table_versions",
        "/v1/table/{id}/version/list",
        ("branch", "page_token", "limit", "descending"),
        json_body=False,
    ),
    Route("create_table_version", "/v1/table/{id}/version/create"),
    Route("describe_table_version", "/v1/table/{id}/version/describe"),
    Route("batch_delete_table_versions", "/v1/table/{id}/version/delete"),
    Route("batch_create_table_versions", "/v1/table/version/batch-create"),
    Route("batch_commit_tables", "/v1/table/batch-commit"),
    Route("list_table_tags", "/v1/table/{id}/tags/list", ("page_token", "limit"), json_body=False),
    Route("get_table_tag_version", "/v1/table/{id}/tags/version"),
    Route("create_table_tag", "/v1/table/{id}/tags/create"),
    Route("delete_table_tag", "/v1/table/{id}/tags/delete"),
    Route("update_table_tag", "/v1/table/{id}/tags/update"),
    Route("list_table_branches", "/v1/table/{id}/branches/list", ("page_token", "limit"), json_body=False),
    Route("create_table_branch", "/v1/table/{id}/branches/create"),
    Route("delete_table_branch", "/v1/table/{id}/branches/delete"),
    # transactions, materialized views
    Route("describe_transaction", "/v1/transaction/{id}/describe"),
    Route("alter_transaction", "/v1/transaction/{id}/alter"),
    Route("create_materialized_view", "/v1/materialized_view/{id}/create"),
    Route("refresh_materialized_view", "/v1/materialized_view/{id}/refresh"),
)
