// A small Iceberg REST catalog server for tests and demos: every request is routed to
// org.apache.iceberg.rest.CatalogHandlers (the handlers the apache/iceberg-rest-fixture image
// runs) over a JdbcCatalog on SQLite, one catalog per warehouse.
//
// It lives in org.apache.iceberg.rest to reach RESTObjectMapper, the mapper the handlers'
// request and response types are written for.
package org.apache.iceberg.rest;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import org.apache.iceberg.catalog.Namespace;
import org.apache.iceberg.catalog.TableIdentifier;
import org.apache.iceberg.exceptions.AlreadyExistsException;
import org.apache.iceberg.exceptions.BadRequestException;
import org.apache.iceberg.exceptions.CommitFailedException;
import org.apache.iceberg.exceptions.CommitStateUnknownException;
import org.apache.iceberg.exceptions.ForbiddenException;
import org.apache.iceberg.exceptions.NamespaceNotEmptyException;
import org.apache.iceberg.exceptions.NoSuchNamespaceException;
import org.apache.iceberg.exceptions.NoSuchTableException;
import org.apache.iceberg.exceptions.NoSuchViewException;
import org.apache.iceberg.exceptions.NotAuthorizedException;
import org.apache.iceberg.exceptions.NotFoundException;
import org.apache.iceberg.exceptions.ServiceUnavailableException;
import org.apache.iceberg.exceptions.UnprocessableEntityException;
import org.apache.iceberg.exceptions.ValidationException;
import org.apache.iceberg.jdbc.JdbcCatalog;
import org.apache.iceberg.jdbc.JdbcClientPool;
import org.apache.iceberg.BaseTable;
import org.apache.iceberg.BaseTransaction;
import org.apache.iceberg.Table;
import org.apache.iceberg.Transaction;
import org.apache.iceberg.Transactions;
import org.apache.iceberg.rest.requests.CommitTransactionRequest;
import org.apache.iceberg.rest.responses.LoadTableResponse;
import org.apache.iceberg.rest.requests.CreateNamespaceRequest;
import org.apache.iceberg.rest.requests.CreateTableRequest;
import org.apache.iceberg.rest.requests.RegisterTableRequest;
import org.apache.iceberg.rest.requests.RenameTableRequest;
import org.apache.iceberg.rest.requests.UpdateNamespacePropertiesRequest;
import org.apache.iceberg.rest.requests.UpdateTableRequest;
import org.apache.iceberg.rest.responses.ConfigResponse;
import org.apache.iceberg.rest.responses.ErrorResponse;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;

public class LocalRestCatalog {
  /** How /v1/config announces the API prefix, and which paths the server routes. */
  enum PrefixStyle {
    NONE, // no prefix; only /v1/namespaces/... (the apache/iceberg-rest-fixture style)
    DEFAULTS, // an opaque prefix in "defaults" (Lakekeeper style)
    OVERRIDES, // an opaque prefix in "overrides", a wrong one in "defaults" (Polaris, Unity style)
    ANY // no prefix; routes /v1/<warehouse>/...
  }

  private static final String SHARED_CATALOG = "local";
  private static final List<Endpoint> ENDPOINTS =
      Arrays.asList(
          Endpoint.V1_LIST_NAMESPACES,
          Endpoint.V1_LOAD_NAMESPACE,
          Endpoint.V1_NAMESPACE_EXISTS,
          Endpoint.V1_CREATE_NAMESPACE,
          Endpoint.V1_UPDATE_NAMESPACE,
          Endpoint.V1_DELETE_NAMESPACE,
          Endpoint.V1_LIST_TABLES,
          Endpoint.V1_LOAD_TABLE,
          Endpoint.V1_TABLE_EXISTS,
          Endpoint.V1_CREATE_TABLE,
          Endpoint.V1_UPDATE_TABLE,
          Endpoint.V1_DELETE_TABLE,
          Endpoint.V1_RENAME_TABLE,
          Endpoint.V1_REGISTER_TABLE,
          Endpoint.V1_REPORT_METRICS,
          Endpoint.V1_COMMIT_TRANSACTION);

  private final ObjectMapper mapper = RESTObjectMapper.mapper();
  private final Path dataDir;
  private final PrefixStyle style;
  private final Set<String> knownWarehouses; // empty: any warehouse is created on first use
  private final Map<String, JdbcCatalog> catalogs = new ConcurrentHashMap<>();
  private final Map<String, JdbcClientPool> rowReaders = new ConcurrentHashMap<>();
  private final Map<String, String> warehouseByPrefix = new ConcurrentHashMap<>();

  // Test switches, all off by default: required bearer tokens, OAuth2 client credentials with
  // short-lived tokens, and storage credentials vended with loadTable.
  private final Set<String> staticTokens = ConcurrentHashMap.newKeySet();
  private final Map<String, String> oauthClients = new ConcurrentHashMap<>(); // id -> secret
  private final Map<String, Long> issuedTokens = new ConcurrentHashMap<>(); // token -> expiry ms
  private long tokenLifetimeMs = 3_600_000;
  private long advertisedTokenLifetimeMs = -1; // what expires_in says, when it differs
  private ObjectNode vending; // {"prefix", "config", "lifetime-ms"}

  LocalRestCatalog(Path dataDir, PrefixStyle style, Set<String> knownWarehouses) {
    this.dataDir = dataDir;
    this.style = style;
    this.knownWarehouses = knownWarehouses;
    for (String warehouse : knownWarehouses) {
      warehouseByPrefix.put(prefixOf(warehouse), warehouse);
    }
    rememberWarehousesOnDisk();
  }

  /** The warehouses of an earlier run on the same data directory: a restart keeps their prefixes. */
  private void rememberWarehousesOnDisk() {
    File[] names = dataDir.resolve("catalogs").toFile().listFiles((dir, name) -> name.endsWith(".warehouse"));
    for (File file : names == null ? new File[0] : names) {
      try {
        String warehouse = Files.readString(file.toPath(), StandardCharsets.UTF_8);
        warehouseByPrefix.put(prefixOf(warehouse), warehouse);
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
    }
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> options = new HashMap<>();
    for (int i = 0; i + 1 < args.length; i += 2) {
      options.put(args[i].replaceFirst("^--", ""), args[i + 1]);
    }
    Path dataDir = Path.of(options.getOrDefault("data-dir", "local-catalog")).toAbsolutePath();
    Files.createDirectories(dataDir.resolve("catalogs"));
    PrefixStyle style = PrefixStyle.valueOf(options.getOrDefault("prefix-style", "none").toUpperCase(Locale.ROOT));
    Set<String> warehouses = new LinkedHashSet<>();
    for (String name : options.getOrDefault("warehouses", "").split(",")) {
      if (!name.isBlank()) {
        warehouses.add(name.trim());
      }
    }
    LocalRestCatalog catalog = new LocalRestCatalog(dataDir, style, warehouses);
    for (String token : options.getOrDefault("auth-tokens", "").split(",")) {
      if (!token.isBlank()) {
        catalog.staticTokens.add(token.trim());
      }
    }
    for (String client : options.getOrDefault("oauth-clients", "").split(",")) {
      if (client.contains(":")) {
        catalog.oauthClients.put(client.substring(0, client.indexOf(':')), client.substring(client.indexOf(':') + 1));
      }
    }
    catalog.tokenLifetimeMs = (long) (1000 * Double.parseDouble(options.getOrDefault("token-lifetime-seconds", "3600")));
    if (options.containsKey("advertised-token-lifetime-seconds")) {
      catalog.advertisedTokenLifetimeMs =
          (long) (1000 * Double.parseDouble(options.get("advertised-token-lifetime-seconds")));
    }
    if (options.containsKey("vending-file")) {
      catalog.vending = (ObjectNode) catalog.mapper.readTree(Files.readAllBytes(Path.of(options.get("vending-file"))));
    }

    String host = options.getOrDefault("host", "127.0.0.1");
    int port = Integer.parseInt(options.getOrDefault("port", "0"));
    HttpServer server = HttpServer.create(new InetSocketAddress(host, port), 128);
    ExecutorService workers = Executors.newFixedThreadPool(Integer.parseInt(options.getOrDefault("threads", "32")));
    server.setExecutor(workers);
    server.createContext("/", catalog::handle);
    server.start();
    System.out.println("LISTENING http://" + host + ":" + server.getAddress().getPort());
    System.out.flush();
    // The parent process closes our stdin to stop us; a plain kill works as well.
    while (System.in.read() >= 0) {
      // ignore input
    }
    server.stop(0);
    workers.shutdownNow();
    System.exit(0);
  }

  static String prefixOf(String warehouse) {
    return "wh-" + UUID.nameUUIDFromBytes(warehouse.getBytes(StandardCharsets.UTF_8));
  }

  // ---------------------------------------------------------------------------------------------
  // HTTP plumbing

  private static final class Reply {
    final int status;
    final Object body; // null: no body
    final Map<String, String> headers;

    Reply(int status, Object body) {
      this(status, body, Map.of());
    }

    Reply(int status, Object body, Map<String, String> headers) {
      this.status = status;
      this.body = body;
      this.headers = headers;
    }
  }

  private static Reply ok(Object body) {
    return new Reply(200, body);
  }

  private static final Reply NO_CONTENT = new Reply(204, null);

  void handle(HttpExchange exchange) {
    Reply reply;
    try {
      reply = route(exchange);
    } catch (Throwable t) { // every request gets an answer, whatever failed
      reply = errorReply(t);
    }
    try {
      byte[] body = reply.body == null ? null : mapper.writeValueAsBytes(reply.body);
      if (body != null) {
        exchange.getResponseHeaders().set("Content-Type", "application/json");
      }
      reply.headers.forEach((name, value) -> exchange.getResponseHeaders().set(name, value));
      boolean head = "HEAD".equals(exchange.getRequestMethod());
      exchange.sendResponseHeaders(reply.status, body == null || head ? -1 : body.length);
      if (body != null && !head) {
        try (OutputStream out = exchange.getResponseBody()) {
          out.write(body);
        }
      }
    } catch (Throwable t) {
      System.err.println("failed to write a response: " + t);
    } finally {
      exchange.close();
    }
  }

  private Reply errorReply(Throwable t) {
    // CatalogHandlers wraps a failed commit requirement; the cause says what went wrong.
    if (t.getClass().getSimpleName().equals("ValidationFailureException") && t.getCause() != null) {
      t = t.getCause();
    }
    int status = statusOf(t);
    if (status == 500) {
      t.printStackTrace();
    }
    String message = t.getMessage() == null ? t.toString() : t.getMessage();
    return new Reply(
        status,
        ErrorResponse.builder()
            .responseCode(status)
            .withType(t.getClass().getSimpleName())
            .withMessage(message)
            .build());
  }

  // The status codes the Iceberg REST spec gives each failure, as the reference adapter maps them;
  // the first matching class wins, anything else is a 500.
  private static final List<Map.Entry<Class<? extends Throwable>, Integer>> STATUS_BY_FAILURE =
      List.of(
          Map.entry(NoSuchNamespaceException.class, 404),
          Map.entry(NoSuchTableException.class, 404),
          Map.entry(NoSuchViewException.class, 404),
          Map.entry(NotFoundException.class, 404),
          Map.entry(AlreadyExistsException.class, 409),
          Map.entry(NamespaceNotEmptyException.class, 409),
          Map.entry(CommitFailedException.class, 409),
          Map.entry(IllegalArgumentException.class, 400),
          Map.entry(ValidationException.class, 400),
          Map.entry(BadRequestException.class, 400),
          Map.entry(IOException.class, 400),
          Map.entry(CredentialsExpired.class, 419),
          Map.entry(NotAuthorizedException.class, 401),
          Map.entry(ForbiddenException.class, 403),
          Map.entry(UnsupportedOperationException.class, 406),
          Map.entry(UnprocessableEntityException.class, 422),
          Map.entry(ServiceUnavailableException.class, 503),
          Map.entry(CommitStateUnknownException.class, 500));

  private static int statusOf(Throwable t) {
    for (Map.Entry<Class<? extends Throwable>, Integer> entry : STATUS_BY_FAILURE) {
      if (entry.getKey().isInstance(t)) {
        return entry.getValue();
      }
    }
    return 500;
  }

  private static Map<String, String> queryOf(HttpExchange exchange) {
    Map<String, String> query = new HashMap<>();
    String raw = exchange.getRequestURI().getRawQuery();
    if (raw == null || raw.isEmpty()) {
      return query;
    }
    for (String pair : raw.split("&")) {
      int eq = pair.indexOf('=');
      String key = eq < 0 ? pair : pair.substring(0, eq);
      String value = eq < 0 ? "" : pair.substring(eq + 1);
      query.put(URLDecoder.decode(key, StandardCharsets.UTF_8), URLDecoder.decode(value, StandardCharsets.UTF_8));
    }
    return query;
  }

  private <T> T readBody(HttpExchange exchange, Class<T> type) throws IOException {
    byte[] body = exchange.getRequestBody().readAllBytes();
    T value = mapper.readValue(body, type);
    if (value == null) {
      throw new BadRequestException("Missing request body");
    }
    return value;
  }

  private static BadRequestException noRoute(String method, String path) {
    return new BadRequestException("No route for request: %s %s", method, path);
  }

  // ---------------------------------------------------------------------------------------------
  // Auth and vended credentials (test switches)

  /** An access token that was valid once but has expired: the Iceberg REST spec's 419. */
  static class CredentialsExpired extends RuntimeException {
    CredentialsExpired() {
      super("Credentials have timed out");
    }
  }

  private boolean authRequired() {
    return !staticTokens.isEmpty() || !oauthClients.isEmpty();
  }

  private void authenticate(HttpExchange exchange) {
    if (!authRequired()) {
      return;
    }
    String header = exchange.getRequestHeaders().getFirst("Authorization");
    String token = header != null && header.regionMatches(true, 0, "Bearer ", 0, 7) ? header.substring(7).trim() : null;
    if (token == null) {
      throw new NotAuthorizedException("Missing bearer token");
    }
    if (staticTokens.contains(token)) {
      return;
    }
    Long expiry = issuedTokens.get(token);
    if (expiry == null) {
      throw new NotAuthorizedException("Unknown bearer token");
    }
    if (expiry < System.currentTimeMillis()) {
      throw new CredentialsExpired();
    }
  }

  /** OAuth2 client credentials (RFC 6749 4.4): client id and secret in the form or in Basic auth. */
  private Reply issueToken(HttpExchange exchange) throws IOException {
    Map<String, String> form =
        RESTUtil.decodeFormData(new String(exchange.getRequestBody().readAllBytes(), StandardCharsets.UTF_8));
    String clientId = form.get("client_id");
    String secret = form.get("client_secret");
    String basic = exchange.getRequestHeaders().getFirst("Authorization");
    if (basic != null && basic.regionMatches(true, 0, "Basic ", 0, 6)) {
      String decoded = new String(java.util.Base64.getDecoder().decode(basic.substring(6).trim()), StandardCharsets.UTF_8);
      clientId = decoded.substring(0, Math.max(0, decoded.indexOf(':')));
      secret = decoded.substring(decoded.indexOf(':') + 1);
    }
    if (!"client_credentials".equals(form.get("grant_type"))
        || clientId == null
        || secret == null
        || !secret.equals(oauthClients.get(clientId))) {
      ObjectNode error = mapper.createObjectNode();
      error.put("error", "invalid_client");
      error.put("error_description", "Unknown client or wrong secret");
      return new Reply(401, error);
    }
    String token = "local-" + UUID.randomUUID();
    issuedTokens.put(token, System.currentTimeMillis() + tokenLifetimeMs);
    ObjectNode answer = mapper.createObjectNode();
    answer.put("access_token", token);
    answer.put("token_type", "bearer");
    answer.put("issued_token_type", "urn:ietf:params:oauth:token-type:access_token");
    long advertised = advertisedTokenLifetimeMs >= 0 ? advertisedTokenLifetimeMs : tokenLifetimeMs;
    answer.put("expires_in", Math.max(1, advertised / 1000));
    return ok(answer);
  }

  private boolean wantsVendedCredentials(HttpExchange exchange) {
    String delegation = exchange.getRequestHeaders().getFirst("X-Iceberg-Access-Delegation");
    return vending != null && delegation != null && delegation.contains("vended-credentials");
  }

  /** The vended storage configuration, its expiry set from now. */
  private ObjectNode vendedConfig() {
    ObjectNode config = vending.get("config").deepCopy();
    long expiresAt = System.currentTimeMillis() + vending.path("lifetime-ms").asLong(3_600_000);
    for (String expiryKey : List.of("s3.session-token-expires-at-ms", "gcs.oauth2.token-expires-at")) {
      if (config.has(expiryKey.startsWith("s3") ? "s3.access-key-id" : "gcs.oauth2.token")) {
        config.put(expiryKey, Long.toString(expiresAt));
      }
    }
    return config;
  }

  private ArrayNode storageCredentials() {
    ArrayNode credentials = mapper.createArrayNode();
    ObjectNode credential = credentials.addObject();
    credential.put("prefix", vending.get("prefix").asText());
    credential.set("config", vendedConfig());
    return credentials;
  }

  /** A loadTable/createTable answer, with vended credentials when the client asked for them. */
  private Reply tableReply(Object response, HttpExchange exchange) {
    if (!wantsVendedCredentials(exchange)) {
      return ok(response);
    }
    ObjectNode node = mapper.valueToTree(response);
    ObjectNode config = node.has("config") ? (ObjectNode) node.get("config") : node.putObject("config");
    config.setAll(vendedConfig());
    node.set("storage-credentials", storageCredentials());
    return ok(node);
  }

  // ---------------------------------------------------------------------------------------------
  // Warehouses

  private void requireKnown(String warehouse) {
    if (warehouse == null || warehouse.isEmpty()) {
      throw new BadRequestException("A warehouse is required");
    }
    if (!knownWarehouses.isEmpty() && !knownWarehouses.contains(warehouse)) {
      throw new NotFoundException("Warehouse does not exist: %s", warehouse);
    }
  }

  private JdbcCatalog catalogFor(String name) {
    return catalogs.computeIfAbsent(name, this::openCatalog);
  }

  private static String databaseUrl(Path dataDir, String warehouse) {
    return "jdbc:sqlite:" + dataDir.resolve("catalogs").resolve(prefixOf(warehouse) + ".db");
  }

  /** A table's current metadata file, read from the catalog's row (null: no such table). */
  private String metadataLocation(JdbcCatalog catalog, TableIdentifier table) {
    JdbcClientPool pool =
        rowReaders.computeIfAbsent(
            catalog.name(), name -> new JdbcClientPool(2, databaseUrl(dataDir, name), Map.of()));
    try {
      return pool.run(
          connection -> {
            try (java.sql.PreparedStatement statement =
                connection.prepareStatement(
                    "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ?"
                        + " AND table_name = ? AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)")) {
              statement.setString(1, catalog.name());
              statement.setString(2, String.join(".", table.namespace().levels()));
              statement.setString(3, table.name());
              try (java.sql.ResultSet row = statement.executeQuery()) {
                return row.next() ? row.getString(1) : null;
              }
            }
          });
    } catch (java.sql.SQLException | InterruptedException e) {
      return null; // answered in full instead
    }
  }

  /** The ETag of a table's state as answered: its metadata file and the snapshots asked for. */
  private static String etagOf(String metadataLocation, String snapshots) {
    byte[] state = (metadataLocation + "\n" + snapshots).getBytes(StandardCharsets.UTF_8);
    return "\"" + UUID.nameUUIDFromBytes(state) + "\"";
  }

  private JdbcCatalog openCatalog(String name) {
    String key = prefixOf(name);
    try {
      Files.createDirectories(dataDir.resolve("catalogs"));
      Files.writeString(dataDir.resolve("catalogs").resolve(key + ".warehouse"), name, StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    Path warehouseDir = dataDir.resolve("warehouses").resolve(key);
    Map<String, String> properties = new HashMap<>();
    properties.put("uri", databaseUrl(dataDir, name));
    properties.put("warehouse", warehouseDir.toString());
    properties.put("io-impl", LocalFileIO.class.getName());
    properties.put(LocalFileIO.OBJECT_STORE_ROOT, dataDir.resolve("object-store").toString());
    // A file database (an in-memory one would be empty per connection) in WAL mode: readers run in
    // parallel, writers queue on the busy timeout instead of failing with SQLITE_BUSY.
    properties.put("clients", "4");
    properties.put("jdbc.journal_mode", "WAL");
    properties.put("jdbc.busy_timeout", "30000");
    properties.put("jdbc.synchronous", "NORMAL");
    properties.put("jdbc.strict-mode", "true");
    properties.put("jdbc.schema-version", "V1");
    JdbcCatalog catalog = new JdbcCatalog();
    catalog.initialize(name, properties);
    return catalog;
  }

  private Reply config(Map<String, String> query) {
    String warehouse = query.get("warehouse");
    List<Endpoint> endpoints = new ArrayList<>(ENDPOINTS);
    if (vending != null) {
      endpoints.add(Endpoint.V1_TABLE_CREDENTIALS);
    }
    ConfigResponse.Builder response = ConfigResponse.builder().withEndpoints(endpoints);
    if (style != PrefixStyle.NONE || warehouse != null) {
      requireKnown(warehouse);
    }
    if (warehouse != null && (style == PrefixStyle.DEFAULTS || style == PrefixStyle.OVERRIDES)) {
      String prefix = prefixOf(warehouse);
      warehouseByPrefix.put(prefix, warehouse);
      if (style == PrefixStyle.DEFAULTS) {
        response.withDefault("prefix", prefix);
      } else {
        // A client that ignores the overrides sends requests to a path this server does not route.
        response.withDefault("prefix", warehouse);
        response.withOverride("prefix", prefix);
      }
    }
    return ok(response.build());
  }

  /**
   * A multi-table commit, as the reference adapter does it: every change's requirements are
   * checked and its updates staged in a transaction before any table commits. Commits of a
   * warehouse are serialized, so no other commit can land between the checks and the commits:
   * all the changes apply, or none does.
   */
  private static void commitTransaction(JdbcCatalog catalog, CommitTransactionRequest request) {
    synchronized (catalog) {
      List<Transaction> transactions = new ArrayList<>();
      for (UpdateTableRequest change : request.tableChanges()) {
        TableIdentifier identifier = change.identifier();
        Table table = catalog.loadTable(identifier);
        Transaction transaction =
            Transactions.newTransaction(identifier.toString(), ((BaseTable) table).operations());
        CatalogHandlers.commit(((BaseTransaction) transaction).underlyingOps(), change);
        transactions.add(transaction);
      }
      transactions.forEach(Transaction::commitTransaction);
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Routing

  private Reply route(HttpExchange exchange) throws IOException {
    String method = exchange.getRequestMethod();
    String path = exchange.getRequestURI().getRawPath();
    Map<String, String> query = queryOf(exchange);
    // Split the raw path, so that encoded separators (%1F) and slashes (%2F) survive.
    List<String> parts = new ArrayList<>(Arrays.asList(path.replaceAll("^/+|/+$", "").split("/")));
    if (parts.isEmpty() || !parts.get(0).equals("v1")) {
      throw noRoute(method, path);
    }
    parts.remove(0);
    if (parts.equals(List.of("oauth", "tokens")) && method.equals("POST")) {
      return issueToken(exchange);
    }
    authenticate(exchange);
    if (parts.size() == 1 && parts.get(0).equals("config") && method.equals("GET")) {
      return config(query);
    }

    JdbcCatalog catalog;
    switch (style) {
      case NONE:
        catalog = catalogFor(SHARED_CATALOG);
        break;
      case ANY:
        if (parts.size() < 2) {
          throw noRoute(method, path);
        }
        String warehouse = RESTUtil.decodeString(parts.remove(0));
        requireKnown(warehouse);
        catalog = catalogFor(warehouse);
        break;
      default:
        if (parts.size() < 2 || !warehouseByPrefix.containsKey(parts.get(0))) {
          throw noRoute(method, path);
        }
        catalog = catalogFor(warehouseByPrefix.get(parts.remove(0)));
    }
    Reply reply = routeCatalog(catalog, method, parts, query, exchange);
    if (reply == null) {
      throw noRoute(method, path);
    }
    return reply;
  }

  private static boolean matches(List<String> parts, String... pattern) {
    if (parts.size() != pattern.length) {
      return false;
    }
    for (int i = 0; i < pattern.length; i++) {
      if (!pattern[i].equals("*") && !pattern[i].equals(parts.get(i))) {
        return false;
      }
    }
    return true;
  }

  private Reply routeCatalog(
      JdbcCatalog catalog, String method, List<String> parts, Map<String, String> query, HttpExchange exchange)
      throws IOException {
    String pageToken = query.get("pageToken");
    String pageSize = query.get("pageSize");

    if (matches(parts, "namespaces")) {
      switch (method) {
        case "GET":
          Namespace parent =
              query.containsKey("parent")
                  ? RESTUtil.namespaceFromQueryParam(query.get("parent"))
                  : Namespace.empty();
          return ok(
              pageSize == null
                  ? CatalogHandlers.listNamespaces(catalog, parent)
                  : CatalogHandlers.listNamespaces(catalog, parent, pageToken, pageSize));
        case "POST":
          return ok(CatalogHandlers.createNamespace(catalog, readBody(exchange, CreateNamespaceRequest.class)));
        default:
          return null;
      }
    }
    if (matches(parts, "transactions", "commit") && method.equals("POST")) {
      commitTransaction(catalog, readBody(exchange, CommitTransactionRequest.class));
      return NO_CONTENT;
    }
    if (matches(parts, "tables", "rename") && method.equals("POST")) {
      CatalogHandlers.renameTable(catalog, readBody(exchange, RenameTableRequest.class));
      return NO_CONTENT;
    }
    if (parts.size() < 2 || !parts.get(0).equals("namespaces")) {
      return null;
    }
    Namespace namespace = RESTUtil.decodeNamespace(parts.get(1), RESTUtil.NAMESPACE_SEPARATOR_URLENCODED_UTF_8);

    if (matches(parts, "namespaces", "*")) {
      switch (method) {
        case "GET":
          return ok(CatalogHandlers.loadNamespace(catalog, namespace));
        case "HEAD":
          CatalogHandlers.namespaceExists(catalog, namespace);
          return NO_CONTENT;
        case "DELETE":
          CatalogHandlers.dropNamespace(catalog, namespace);
          return NO_CONTENT;
        default:
          return null;
      }
    }
    if (matches(parts, "namespaces", "*", "properties") && method.equals("POST")) {
      return ok(
          CatalogHandlers.updateNamespaceProperties(
              catalog, namespace, readBody(exchange, UpdateNamespacePropertiesRequest.class)));
    }
    if (matches(parts, "namespaces", "*", "register") && method.equals("POST")) {
      return ok(CatalogHandlers.registerTable(catalog, namespace, readBody(exchange, RegisterTableRequest.class)));
    }
    if (matches(parts, "namespaces", "*", "tables")) {
      switch (method) {
        case "GET":
          return ok(
              pageSize == null
                  ? CatalogHandlers.listTables(catalog, namespace)
                  : CatalogHandlers.listTables(catalog, namespace, pageToken, pageSize));
        case "POST":
          CreateTableRequest request = readBody(exchange, CreateTableRequest.class);
          return tableReply(
              request.stageCreate()
                  ? CatalogHandlers.stageTableCreate(catalog, namespace, request)
                  : CatalogHandlers.createTable(catalog, namespace, request),
              exchange);
        default:
          return null;
      }
    }
    if (parts.size() < 4) {
      return null;
    }
    TableIdentifier table = TableIdentifier.of(namespace, RESTUtil.decodeString(parts.get(3)));
    if (matches(parts, "namespaces", "*", "tables", "*")) {
      switch (method) {
        case "GET":
          // Freshness-aware loading (the REST spec's ETag, If-None-Match and 304): an unchanged
          // table is answered from the catalog's row alone, without reading its metadata file.
          String snapshots = query.getOrDefault("snapshots", "all");
          String known = exchange.getRequestHeaders().getFirst("If-None-Match");
          if (known != null && !wantsVendedCredentials(exchange)) {
            String current = metadataLocation(catalog, table);
            if (current != null && known.equals(etagOf(current, snapshots))) {
              return new Reply(304, null);
            }
          }
          // "refs": only the snapshots that branches and tags reference
          LoadTableResponse loaded =
              CatalogHandlers.loadTable(
                  catalog,
                  table,
                  "refs".equals(snapshots)
                      ? RESTCatalogProperties.SnapshotMode.REFS
                      : RESTCatalogProperties.SnapshotMode.ALL);
          String etag = etagOf(loaded.metadataLocation(), snapshots);
          Reply reply = tableReply(loaded, exchange);
          return new Reply(reply.status, reply.body, Map.of("ETag", etag));
        case "HEAD":
          CatalogHandlers.tableExists(catalog, table);
          return NO_CONTENT;
        case "DELETE":
          if (Boolean.parseBoolean(query.getOrDefault("purgeRequested", "false"))) {
            CatalogHandlers.purgeTable(catalog, table);
          } else {
            CatalogHandlers.dropTable(catalog, table);
          }
          return NO_CONTENT;
        case "POST":
          UpdateTableRequest update = readBody(exchange, UpdateTableRequest.class);
          synchronized (catalog) { // one commit at a time per warehouse, so transactions are atomic
            return ok(CatalogHandlers.updateTable(catalog, table, update));
          }
        default:
          return null;
      }
    }
    if (matches(parts, "namespaces", "*", "tables", "*", "credentials") && method.equals("GET") && vending != null) {
      CatalogHandlers.tableExists(catalog, table);
      ObjectNode answer = mapper.createObjectNode();
      answer.set("storage-credentials", storageCredentials());
      return ok(answer);
    }
    if (matches(parts, "namespaces", "*", "tables", "*", "metrics") && method.equals("POST")) {
      exchange.getRequestBody().readAllBytes();
      return NO_CONTENT;
    }
    return null;
  }
}
