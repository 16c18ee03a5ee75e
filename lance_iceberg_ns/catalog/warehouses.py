"""Warehouses: one pyiceberg REST catalog per warehouse, created on first use and cached.

The API prefix of a warehouse comes from ``GET /v1/config?warehouse=...``; pyiceberg merges the
answer's ``defaults``, our properties and its ``overrides`` in that order, so a prefix in
``overrides`` wins. When the server announces no prefix, the bridge decides once per warehouse:

1. it lists namespaces under ``/v1/<warehouse>/`` (the Lance spec's fallback, which servers that
   route per-warehouse paths answer); if that works, the warehouse name is the prefix;
2. otherwise (``400 No route``, ``404``) it uses unprefixed paths ``/v1/namespaces/...``, which is
   how the apache/iceberg-rest-fixture style of server routes everything.

The decision is kept with the catalog, as long as the catalog is kept (``warehouse_cache``).
"""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlencode

import requests
import urllib3
from pyiceberg import exceptions as iceberg
from pyiceberg.catalog.rest import PAGE_SIZE, Capability, Endpoint, Endpoints, RestCatalog, TableResponse
from pyiceberg.catalog.rest.auth import AuthManagerAdapter, NoopAuthManager, OAuth2AuthManager
from pyiceberg.exceptions import NoSuchTableError
from requests import HTTPError
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from lance_iceberg_ns.cache import RecentlyUsed
from lance_iceberg_ns.catalog import pyiceberg_internals as internals
from lance_iceberg_ns.catalog import round_trips
from lance_iceberg_ns.config.settings import Settings

logger = logging.getLogger(__name__)


class _TransportAdapter(HTTPAdapter):
    """Applies the configured timeouts to every request, and retries what is safe to retry:
    connections that failed before a request was sent, and idempotent reads answered with
    429/502/503/504."""

    def __init__(self, settings: Settings, pool_size: int) -> None:
        retries = Retry(
            total=settings.max_retries,
            connect=settings.max_retries,
            read=settings.max_retries,
            status=settings.max_retries,
            other=0,
            allowed_methods=frozenset({"GET", "HEAD"}),
            status_forcelist=(429, 502, 503, 504),
            backoff_factor=0.1,
            respect_retry_after_header=True,
            raise_on_status=False,
        )
        super().__init__(max_retries=retries, pool_connections=4, pool_maxsize=pool_size)
        self._timeout = (settings.connect_timeout_ms / 1000.0, settings.read_timeout_ms / 1000.0)
        self.urllib3_timeout = urllib3.Timeout(connect=self._timeout[0], read=self._timeout[1])

    def close(self) -> None:
        """Keep the connections: pyiceberg closes the session it fetched the config with, and the
        catalog's own session goes on with the same pool (see ``BridgeRestCatalog``)."""

    def release(self) -> None:
        """Close the pooled connections. urllib3's pool manager only lets go of its pools, whose
        sockets stay open until the pools are garbage collected; a request still running on one
        finishes, and its connection closes when it is given back."""
        managers = [self.poolmanager, *self.proxy_manager.values()]
        # keys(): urllib3 refuses to iterate its container itself (not thread-safe)
        pools = [pool for manager in managers for key in manager.pools.keys() if (pool := manager.pools.get(key))]  # noqa: SIM118
        super().close()  # first, so that no new request is handed a pool closed below
        for pool in pools:
            pool.close()

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        if kwargs.get("timeout") is None:
            kwargs["timeout"] = self._timeout
        with round_trips.round_trip(request.method or "GET") as trip:
            try:
                response = super().send(request, **kwargs)
            except requests.ConnectionError as exc:
                if not (exc.args and isinstance(exc.args[0], urllib3.exceptions.ClosedPoolError)):
                    raise
                # the pool was closed (released) before the request went out: the manager makes a new one
                response = super().send(request, **kwargs)
            trip.status = response.status_code
        return response


@functools.lru_cache(maxsize=64)
def _environment_settings(url: str) -> tuple[dict[str, str], str | None]:
    """Proxies and CA bundle from the environment for ``url``, read once per process."""
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    return dict(requests.utils.get_environ_proxies(url)), bundle


# The properties pyiceberg builds a session's authentication from.
_AUTH_PROPERTIES = frozenset(
    {"auth", "token", "credential", "scope", "oauth2-server-uri", "audience", "resource", "rest.sigv4-enabled"}
)
# Failures after which a create may or may not have landed.
LOST_ANSWER = (
    requests.ConnectionError,
    requests.Timeout,
    requests.exceptions.ChunkedEncodingError,
    iceberg.CommitStateUnknownException,
    iceberg.ServerError,
)
COMMIT_TRANSACTION = Endpoint.from_string("POST /v1/{prefix}/transactions/commit")  # no pyiceberg constant


def connection_pool_size(settings: Settings) -> int:
    """Connections a catalog keeps open: one per lookup thread, so that a listing's lookups find
    their connections open the next time, and room for the calls other threads make meanwhile."""
    return settings.lookup_threads + 8


class BridgeRestCatalog(RestCatalog):
    """pyiceberg's REST catalog, with our timeouts, retries and connection pool on its session.

    pyiceberg fetches the config with a session of its own, then makes the catalog's session: both
    use one connection pool and, when the config changed nothing about authentication, one auth
    manager, so that the first call after the config reuses its connection (no second handshake)
    and its OAuth2 token (no second token request).
    """

    def __init__(self, name: str, settings: Settings, **properties: str) -> None:
        self._settings = settings  # read by the session hook below, which the base constructor calls
        self._transport = _TransportAdapter(settings, pool_size=connection_pool_size(settings))
        self._first_auth: tuple[str, Any, Any] | None = None  # (auth properties, adapter, manager)
        # the last loadTable answer per (table, refs only), with its ETag: (etag, summary)
        self._known_tables: RecentlyUsed[tuple[tuple[str, ...], bool], tuple[str, TableSummary]] = RecentlyUsed(1024)
        # what a request to a URL is sent with, worked out once: (adapter, pool, path); see _route
        self._routes: RecentlyUsed[tuple[str, Any, Any], tuple[Any, Any, str]] = RecentlyUsed(1024)
        self._table_urls: RecentlyUsed[tuple[str, ...], str] = RecentlyUsed(1024)  # loadTable's, by identifier
        try:
            super().__init__(name, **properties)
        except BaseException:
            # a refused /v1/config leaves its answer's connection in our pool: nobody else will close it
            self._transport.release()
            raise

    def close(self) -> None:
        """Close the session and its pooled connections; a request still running finishes, and
        later ones open new connections."""
        super().close()
        self._routes.forget_where(lambda _key, _route: True)  # they hold the pools being closed
        self._transport.release()

    def _create_session(self) -> requests.Session:  # pyiceberg's hook (see pyiceberg_internals)
        session = internals.base_session(self)
        if not any(self.properties.get(key) for key in ("token", "credential", "auth")):
            # With nothing to authenticate with, pyiceberg sends "Authorization: Bearer None", which a
            # catalog that needs no authentication may refuse (401). Decided here, on the properties
            # as the catalog's /v1/config left them: it may hand out a token.
            internals.set_auth_manager(self, NoopAuthManager())
            session.auth = AuthManagerAdapter(internals.auth_manager(self))
        auth_properties = repr(sorted((k, v) for k, v in self.properties.items() if k in _AUTH_PROPERTIES))
        if self._first_auth is None:
            self._first_auth = (auth_properties, session.auth, internals.auth_manager(self))
        elif self._first_auth[0] == auth_properties:
            _, session.auth, manager = self._first_auth
            internals.set_auth_manager(self, manager)
        # requests re-reads proxy and CA-bundle variables from the environment on every request,
        # which costs about as much as a loopback round trip; read them once instead.
        if session.trust_env:
            proxies, bundle = _environment_settings(self.properties.get("uri", ""))
            session.proxies.update(proxies)
            if bundle and session.verify is True:
                session.verify = bundle
            session.trust_env = False
        session.mount("http://", self._transport)
        session.mount("https://", self._transport)
        return session

    def _send_if_ok(
        self,
        method: str,
        url: str,
        params: dict[str, str],
        errors: dict[int, type[Exception]],
        body: bytes | None = None,
        extra_headers: dict[str, str] | None = None,
    ) -> _Answer | None:
        """Send through the session's own adapter (its connection pool, TLS settings, retries and
        timeouts), headers and auth header, without requests' per-call machinery: about half a
        millisecond a call, more than the catalog's own work for a small answer.

        Returns a 2xx answer (or a 304 to a conditional request), and raises pyiceberg's error for an error answer (from
        this one answer: the request is not made twice; ``errors`` maps statuses to pyiceberg's
        exceptions as its own calls do). ``None`` means "use the session", which the caller does
        for 401/419 (pyiceberg refreshes the token and retries), redirects, and whenever a proxy, a
        cookie, or another adapter (SigV4 signing) is in play.
        """
        session = internals.session(self)
        auth = session.auth
        if not isinstance(auth, AuthManagerAdapter) or session.proxies or len(session.cookies):
            return None
        headers = {**session.headers, **(extra_headers or {})}
        if authorization := auth.auth_manager.auth_header():
            headers["Authorization"] = authorization
        try:
            route = self._route(session, f"{url}?{urlencode(params)}" if params else url)
            if route is None:
                return None
            adapter, pool, path = route
            with round_trips.round_trip(method) as trip:
                response = pool.urlopen(
                    method,
                    path,
                    body=body,
                    headers=headers,
                    retries=adapter.max_retries,
                    timeout=adapter.urllib3_timeout,
                    redirect=False,
                    assert_same_host=False,
                )
                trip.status = response.status
        except urllib3.exceptions.ClosedPoolError:
            # the pool was closed under this request (the catalog was let go, see WarehouseCatalogs):
            # the session's adapter opens a new one
            return None
        except urllib3.exceptions.HTTPError as exc:  # connection failures, after the retries
            raise requests.ConnectionError(str(exc)) from exc
        if 200 <= response.status < 300 or response.status == NOT_MODIFIED:
            return _Answer(response.status, bytes(response.data), response.headers.get("ETag"))
        if response.status in (401, 419) or 300 <= response.status < 400:
            return None
        answer = internals.response_from_bytes(response.status, response.data, url, response.headers)
        try:
            answer.raise_for_status()
        except HTTPError as exc:
            internals.raise_error_answer(exc, errors)
        return None

    def _route(self, session: requests.Session, url: str) -> tuple[Any, Any, str] | None:
        """The adapter, connection pool and path a request to ``url`` goes through, as requests
        would pick them; None when the adapter is not ours. Worked out once per URL and TLS
        settings (quoting the URL and finding its pool cost as much as the request itself on a
        fast catalog), and again whenever the session's adapter or the pool changed (a closed
        pool, one the pool manager let go)."""
        key = (url, session.verify, session.cert)
        known = self._routes.get(key)
        adapter = session.get_adapter(url)
        if known is not None and known[0] is adapter and known[1].pool is not None:
            return known
        if not isinstance(adapter, _TransportAdapter):
            return None
        request = requests.PreparedRequest()
        request.url = requests.utils.requote_uri(url)  # requests' own quoting (the namespace separator is \x1f)
        host, pool_kwargs = adapter.build_connection_pool_key_attributes(request, session.verify, session.cert)
        route = (adapter, adapter.poolmanager.connection_from_host(**host, pool_kwargs=pool_kwargs), request.path_url)
        self._routes.keep(key, route)
        return route

    def load_table_summary(self, identifier: tuple[str, ...], refs_only: bool = False) -> TableSummary:
        """``loadTable``, keeping only the location and properties.

        pyiceberg's ``load_table`` validates the whole metadata and builds a ``Table`` with its
        FileIO, which costs more than the request itself; listings classify every table, so here
        the same request (pyiceberg's session, URL and error handling) is read for two fields.
        ``refs_only`` asks for ``snapshots=refs``, which keeps plain Iceberg tables with long
        histories cheap to classify.

        The load is freshness-aware, as the Iceberg REST spec allows: the answer's ``ETag`` is
        kept with its summary and sent back as ``If-None-Match``, so a catalog that supports it
        answers an unchanged table with a bodiless 304 instead of reading and sending its
        metadata again. Answers that carry vended credentials are not kept (they expire).
        """
        url = self._table_urls.get(tuple(identifier))
        if url is None:
            internals.check_endpoint(self, Capability.V1_LOAD_TABLE)
            url = self.url(Endpoints.load_table, prefixed=True, **internals.identifier_path(self, identifier))
            self._table_urls.keep(tuple(identifier), url)
        params = {"snapshots": "refs"} if refs_only else {}
        key = (tuple(identifier), refs_only)
        known = self._known_tables.get(key)
        conditional = {"If-None-Match": known[0]} if known else {}
        try:
            answer = self._send_if_ok("GET", url, params, {404: NoSuchTableError}, extra_headers=conditional)
            if answer is None:
                answer = self._get_through_session(url, params, {404: NoSuchTableError}, conditional)
        except NoSuchTableError:
            self._known_tables.forget(key)
            raise
        if answer.status == NOT_MODIFIED and known:
            return known[1]
        summary = replace(_summary_from_load_table_json(answer.body), entry=(self.name, *identifier))
        if answer.etag and not summary.config and not summary.storage_credentials:
            self._known_tables.keep(key, (answer.etag, summary))
        else:
            self._known_tables.forget(key)
        return summary

    def load_table_refs(self, identifier: tuple[str, ...]) -> Any:
        """pyiceberg's ``Table`` for ``loadTable`` with ``snapshots=refs``: the current state and the
        snapshots that branches and tags reference, without the history (cheap for long ones)."""
        return self.table_from_summary(identifier, self.load_table_summary(identifier, refs_only=True))

    def table_from_summary(self, identifier: tuple[str, ...], summary: TableSummary) -> Any:
        """pyiceberg's ``Table`` from the answer a summary was read from, with no new request."""
        return internals.table_from_response(self, tuple(identifier), summary.answer)

    def supports_credentials_endpoint(self) -> bool:
        """Whether the server advertised ``GET .../tables/{table}/credentials``."""
        return internals.supports_endpoint(self, Capability.V1_LOAD_CREDENTIALS)

    def load_table_credentials(self, identifier: tuple[str, ...]) -> list[dict[str, Any]]:
        """The table's vended storage credentials, from the credentials endpoint."""
        answer = internals.load_credentials(self, identifier)
        return _credential_dicts(answer.storage_credentials)

    def _refresh_token(self) -> None:  # pyiceberg's hook (see pyiceberg_internals)
        """Called by pyiceberg's retry on 401/419: fetch a new OAuth2 token before the retry.

        pyiceberg refreshes the client-credentials token of its ``OAuth2AuthManager`` before it
        expires, but only its legacy manager reacts to a 401/419; this makes the current one do
        both (for instance when the server revoked the token, or its clock runs ahead).
        """
        manager = getattr(internals.session(self).auth, "auth_manager", None)
        if isinstance(manager, OAuth2AuthManager):
            internals.refresh_oauth2_token(manager.token_provider)
        else:
            internals.base_refresh_token(self)

    def commit_changes(self, changes: list[tuple[tuple[str, ...], tuple[Any, ...], tuple[Any, ...]]]) -> bytes | None:
        """Commit changes (identifier, requirements, updates) to one or several tables atomically:
        one table through its own update endpoint (pyiceberg's request; the new metadata it
        answers is returned unparsed), several through the Iceberg REST ``transactions/commit``
        endpoint, which pyiceberg does not call itself and which answers nothing (None). Raises
        CommitFailedException when a requirement fails: then no table changed."""
        from pyiceberg.catalog.rest import TableIdentifier
        from pyiceberg.table import CommitTableRequest

        requests_json = [
            CommitTableRequest(
                identifier=TableIdentifier.model_validate({"namespace": list(identifier[:-1]), "name": identifier[-1]}),
                requirements=requirements,
                updates=updates,
            ).model_dump_json()
            for identifier, requirements, updates in changes
        ]
        if len(changes) == 1:
            internals.check_endpoint(self, Capability.V1_UPDATE_TABLE)
            url = self.url(Endpoints.update_table, prefixed=True, **internals.identifier_path(self, changes[0][0]))
            body = requests_json[0]
        else:
            internals.check_endpoint(self, COMMIT_TRANSACTION)
            url = self.url("transactions/commit", prefixed=True)
            body = '{"table-changes": [' + ", ".join(requests_json) + "]}"
        errors: dict[int, type[Exception]] = {
            404: iceberg.NoSuchTableError,  # dropped or renamed meanwhile (its namespace with it, perhaps)
            409: iceberg.CommitFailedException,
            500: iceberg.CommitStateUnknownException,
            502: iceberg.CommitStateUnknownException,
            504: iceberg.CommitStateUnknownException,
        }
        answer = self._send_if_ok("POST", url, {}, errors, body.encode())
        if answer is not None:
            return answer.body if len(changes) == 1 else None
        response = internals.session(self).post(url, data=body.encode())
        try:
            response.raise_for_status()
        except HTTPError as exc:
            internals.raise_error_answer(exc, errors)
        return response.content if len(changes) == 1 else None

    def create_table_once(self, identifier: tuple[str, ...], create_key: str, create_id: str, **create: Any) -> Any:
        """``createTable``, safely retried when the answer is lost.

        A create is not idempotent: if its answer is lost (a reset, a timeout, a 5xx from a
        gateway) the table may exist or not, and a plain retry would report TableAlreadyExists for
        the table it made itself. The create therefore carries the one-off property ``create_key``
        = ``create_id``; after a lost answer the table is looked up, and it is ours if it carries
        that id. ``create`` holds pyiceberg's ``create_table`` arguments (schema, location,
        properties)."""
        create = {**create, "properties": {**create.get("properties", {}), create_key: create_id}}
        answer_lost = False
        for attempt in range(self._settings.max_retries + 1):
            try:
                return self.create_table(identifier, **create)
            except iceberg.TableAlreadyExistsError:
                if answer_lost and self._created_with(identifier, create_key, create_id):
                    return self.load_table(identifier)
                raise
            except LOST_ANSWER as exc:
                answer_lost = True
                logger.debug("create %s: answer lost (%s); checking whether it landed", identifier, type(exc).__name__)
                if self._created_with(identifier, create_key, create_id):
                    return self.load_table(identifier)
                if attempt == self._settings.max_retries:
                    raise
                time.sleep(0.1 * 2**attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _created_with(self, identifier: tuple[str, ...], create_key: str, create_id: str) -> bool:
        try:
            summary = self.load_table_summary(identifier, refs_only=True)
        except iceberg.NoSuchTableError:
            return False
        return summary.properties.get(create_key) == create_id

    def list_namespaces(self, namespace: str | tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        """pyiceberg's ``listNamespaces``, with the ``parent`` parameter encoded once.

        pyiceberg 0.12 percent-encodes each part of ``parent`` and then lets requests encode the
        query string again, so the server is asked about ``caf%C3%A9`` for ``café`` and answers
        that it does not exist. The Iceberg REST spec's ``parent`` is the parts joined by the
        namespace separator, encoded as any query parameter is.
        """
        from pyiceberg.catalog.rest import ListNamespaceResponse

        internals.check_endpoint(self, Capability.V1_LIST_NAMESPACES)
        parent = self.identifier_to_tuple(namespace)
        url = self.url(Endpoints.list_namespaces)
        params = {"parent": internals.namespace_separator(self).join(parent)} if parent else {}
        if page_size := self.properties.get(PAGE_SIZE):
            params["pageSize"] = page_size
        errors: dict[int, type[Exception]] = {404: iceberg.NoSuchNamespaceError}
        namespaces: list[tuple[str, ...]] = []
        tokens: set[str] = set()
        while True:
            answer = self._send_if_ok("GET", url, params, errors) or self._get_through_session(url, params, errors)
            page = ListNamespaceResponse.model_validate_json(answer.body)
            namespaces += [tuple(ident) for ident in page.namespaces]
            if not page.next_page_token:
                return namespaces
            if page.next_page_token in tokens:  # a catalog that repeats itself would be asked forever
                raise iceberg.ServerError(f"The catalog repeated the page token {page.next_page_token!r}")
            tokens.add(page.next_page_token)
            params["pageToken"] = page.next_page_token

    @internals.retry_on_expired_token()  # pyiceberg's: refresh the token, retry once on 401/419
    def _get_through_session(
        self,
        url: str,
        params: dict[str, str],
        errors: dict[int, type[Exception]],
        headers: dict[str, str] | None = None,
    ) -> _Answer:
        response = internals.session(self).get(url, params=params, headers=headers)
        try:
            response.raise_for_status()
        except HTTPError as exc:
            internals.raise_error_answer(exc, errors)
        # JSON is UTF-8: the bytes spare requests' charset detection, which servers that send no
        # charset would trigger on every answer.
        return _Answer(response.status_code, response.content, response.headers.get("ETag"))


NOT_MODIFIED = 304


@dataclass(frozen=True)
class _Answer:
    """A catalog's answer to a request: its status, body and ``ETag``."""

    status: int
    body: bytes
    etag: str | None


@dataclass(frozen=True)
class TableSummary:
    """What the bridge reads from a ``loadTable`` answer."""

    location: str
    properties: dict[str, str]
    table_uuid: str | None = None  # the catalog's id of the table: it survives renames
    config: dict[str, str] = field(default_factory=dict, repr=False)  # may hold vended secrets
    storage_credentials: list[dict[str, Any]] = field(default_factory=list, repr=False)
    answer: Any = field(default=None, repr=False, compare=False)  # pyiceberg's TableResponse, for table_from_summary
    entry: tuple[str, ...] = ()  # where the catalog holds it: (warehouse, *identifier)


def _summary_from_load_table_json(body: bytes) -> TableSummary:
    """A loadTable answer, read into pyiceberg's own model of it."""
    answer = TableResponse.model_validate_json(body)
    return TableSummary(
        location=answer.metadata.location,
        properties=dict(answer.metadata.properties),
        table_uuid=str(answer.metadata.table_uuid),
        config=dict(answer.config),
        storage_credentials=_credential_dicts(answer.storage_credentials),
        answer=answer,
    )


def _credential_dicts(credentials: list[Any]) -> list[dict[str, Any]]:
    """pyiceberg's ``StorageCredential`` models as the prefix/config mappings ``credentials`` reads."""
    return [{"prefix": credential.prefix, "config": dict(credential.config)} for credential in credentials]
