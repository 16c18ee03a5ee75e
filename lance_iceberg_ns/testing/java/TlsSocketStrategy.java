// Iceberg's REST client was compiled against HttpClient 5.4, whose TlsSocketStrategy the HttpClient
// 5.2 of Debian does not have yet. HTTPClient names it only where a TLS configurer is set
// (rest.client.tls.configurer-impl), but the JVM's verifier loads it with HTTPClient. This empty
// stand-in lets HTTPClient load; a TLS configurer still fails (NoSuchMethodError), plain HTTP and
// HTTPS with the JVM's defaults work.
package org.apache.iceberg.shaded.org.apache.hc.client5.http.ssl;

public interface TlsSocketStrategy {}
