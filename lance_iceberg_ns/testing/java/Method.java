// The Iceberg runtime jar relocates Apache HttpClient 5 but leaves out its Method enum, which
// org.apache.iceberg.rest.Endpoint uses to normalise HTTP method names. This stands in for it.
package org.apache.iceberg.shaded.org.apache.hc.core5.http;

import java.util.Locale;

public enum Method {
  GET, HEAD, POST, PUT, DELETE, CONNECT, TRACE, OPTIONS, PATCH;

  public static Method normalizedValueOf(String method) {
    return valueOf(method.toUpperCase(Locale.ROOT));
  }

  public boolean isSame(String method) {
    return name().equalsIgnoreCase(method);
  }
}
