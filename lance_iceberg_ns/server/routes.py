"""The Lance REST Namespace routes, as data: one entry per operation of the spec.

Every operation has the same shape: an identifier in the path (joined by the delimiter), some
request fields in the query string, the rest (if any) in a JSON body, and one namespace method to
call. Three operations carry Arrow IPC data as their body instead of JSON.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Route:
    operation: str  # the LanceNamespace method, and the request model's snake-case name
    method: str
    path: str
    model: str  # the request model in lance_namespace
    query: tuple[str, ...] = ()  # request fields read from the query string
    json_body: bool = True  # False: no body
    arrow_body: bool = False  # the body is Arrow IPC data, passed to the method as bytes
    body_field: str | None = None  # the JSON body is this one field of the request, not the request


ROUTES: tuple[Route, ...] = (
    # namespaces
    Route("create_namespace", "POST", "/v1/namespace/{id}/create", "CreateNamespaceRequest"),
    Route("list_namespaces", "GET", "/v1/namespace/{id}/list", "ListNamespacesRequest",
          ("page_token", "limit"), json_body=False),
    Route("describe_namespace", "POST", "/v1/namespace/{id}/describe", "DescribeNamespaceRequest"),
    Route("drop_namespace", "POST", "/v1/namespace/{id}/drop", "DropNamespaceRequest"),
    Route("namespace_exists", "POST", "/v1/namespace/{id}/exists", "NamespaceExistsRequest"),
    Route("list_tables", "GET", "/v1/namespace/{id}/table/list", "ListTablesRequest",
          ("page_token", "limit", "include_declared"), json_body=False),
    # tables: catalog
    Route("declare_table", "POST", "/v1/table/{id}/declare", "DeclareTableRequest"),
    Route("describe_table", "POST", "/v1/table/{id}/describe", "DescribeTableRequest",
          ("with_table_uri", "load_detailed_metadata", "check_declared")),
    Route("table_exists", "POST", "/v1/table/{id}/exists", "TableExistsRequest"),
    Route("drop_table", "POST", "/v1/table/{id}/drop", "DropTableRequest", json_body=False),
    Route("deregister_table", "POST", "/v1/table/{id}/deregister", "DeregisterTableRequest"),
    Route("register_table", "POST", "/v1/table/{id}/register", "RegisterTableRequest"),
    Route("rename_table", "POST", "/v1/table/{id}/rename", "RenameTableRequest"),
    Route("restore_table", "POST", "/v1/table/{id}/restore", "RestoreTableRequest"),
    Route("list_all_tables", "GET", "/v1/table", "ListTablesRequest",
          ("page_token", "limit", "include_declared"), json_body=False),
    # tables: data
    Route("create_table", "POST", "/v1/table/{id}/create", "CreateTableRequest",
          ("mode", "properties", "storage_options"), json_body=False, arrow_body=True),
    Route("insert_into_table", "POST", "/v1/table/{id}/insert", "InsertIntoTableRequest",
          ("branch", "mode"), json_body=False, arrow_body=True),
    Route("merge_insert_into_table", "POST", "/v1/table/{id}/merge_insert", "MergeInsertIntoTableRequest",
          ("branch", "on", "when_matched_update_all", "when_matched_update_all_filt", "when_not_matched_insert_all",
           "when_not_matched_by_source_delete", "when_not_matched_by_source_delete_filt", "timeout", "use_index"),
          json_body=False, arrow_body=True),
    Route("count_table_rows", "POST", "/v1/table/{id}/count_rows", "CountTableRowsRequest"),
    Route("update_table", "POST", "/v1/table/{id}/update", "UpdateTableRequest"),
    Route("delete_from_table", "POST", "/v1/table/{id}/delete", "DeleteFromTableRequest"),
    Route("query_table", "POST", "/v1/table/{id}/query", "QueryTableRequest"),
    Route("explain_table_query_plan", "POST", "/v1/table/{id}/explain_plan", "ExplainTableQueryPlanRequest"),
    Route("analyze_table_query_plan", "POST", "/v1/table/{id}/analyze_plan", "AnalyzeTableQueryPlanRequest"),
    Route("get_table_stats", "POST", "/v1/table/{id}/stats", "GetTableStatsRequest"),
    # tables: schema
    Route("alter_table_add_columns", "POST", "/v1/table/{id}/add_columns", "AlterTableAddColumnsRequest"),
    Route("alter_table_alter_columns", "POST", "/v1/table/{id}/alter_columns", "AlterTableAlterColumnsRequest"),
    Route("alter_table_drop_columns", "POST", "/v1/table/{id}/drop_columns", "AlterTableDropColumnsRequest"),
    Route("alter_table_backfill_columns", "POST", "/v1/table/{id}/backfill_column",
          "AlterTableBackfillColumnsRequest"),
    Route("update_field_metadata", "POST", "/v1/table/{id}/update_field_metadata", "UpdateFieldMetadataRequest"),
    Route("update_table_schema_metadata", "POST", "/v1/table/{id}/schema_metadata/update",
          "UpdateTableSchemaMetadataRequest", ("branch",), body_field="metadata"),
    # tables: indices
    Route("create_table_index", "POST", "/v1/table/{id}/create_index", "CreateTableIndexRequest"),
    Route("create_table_scalar_index", "POST", "/v1/table/{id}/create_scalar_index", "CreateTableIndexRequest"),
    Route("list_table_indices", "POST", "/v1/table/{id}/index/list", "ListTableIndicesRequest"),
    Route("describe_table_index_stats", "POST", "/v1/table/{id}/index/{index_name}/stats",
          "DescribeTableIndexStatsRequest"),
    Route("drop_table_index", "POST", "/v1/table/{id}/index/{index_name}/drop", "DropTableIndexRequest",
          ("branch",), json_body=False),
    # tables: versions, tags, branches
    Route("list_table_versions", "POST", "/v1/table/{id}/version/list", "ListTableVersionsRequest",
          ("branch", "page_token", "limit", "descending"), json_body=False),
    Route("create_table_version", "POST", "/v1/table/{id}/version/create", "CreateTableVersionRequest"),
    Route("describe_table_version", "POST", "/v1/table/{id}/version/describe", "DescribeTableVersionRequest"),
    Route("batch_delete_table_versions", "POST", "/v1/table/{id}/version/delete", "BatchDeleteTableVersionsRequest"),
    Route("batch_create_table_versions", "POST", "/v1/table/version/batch-create", "BatchCreateTableVersionsRequest"),
    Route("batch_commit_tables", "POST", "/v1/table/batch-commit", "BatchCommitTablesRequest"),
    Route("list_table_tags", "POST", "/v1/table/{id}/tags/list", "ListTableTagsRequest",
          ("page_token", "limit"), json_body=False),
    Route("get_table_tag_version", "POST", "/v1/table/{id}/tags/version", "GetTableTagVersionRequest"),
    Route("create_table_tag", "POST", "/v1/table/{id}/tags/create", "CreateTableTagRequest"),
    Route("delete_table_tag", "POST", "/v1/table/{id}/tags/delete", "DeleteTableTagRequest"),
    Route("update_table_tag", "POST", "/v1/table/{id}/tags/update", "UpdateTableTagRequest"),
    Route("list_table_branches", "POST", "/v1/table/{id}/branches/list", "ListTableBranchesRequest",
          ("page_token", "limit"), json_body=False),
    Route("create_table_branch", "POST", "/v1/table/{id}/branches/create", "CreateTableBranchRequest"),
    Route("delete_table_branch", "POST", "/v1/table/{id}/branches/delete", "DeleteTableBranchRequest"),
    # transactions, materialized views
    Route("describe_transaction", "POST", "/v1/transaction/{id}/describe", "DescribeTransactionRequest"),
    Route("alter_transaction", "POST", "/v1/transaction/{id}/alter", "AlterTransactionRequest"),
    Route("create_materialized_view", "POST", "/v1/materialized_view/{id}/create", "CreateMaterializedViewRequest"),
    Route("refresh_materialized_view", "POST", "/v1/materialized_view/{id}/refresh",
          "RefreshMaterializedViewRequest"),
)  # fmt: skip
