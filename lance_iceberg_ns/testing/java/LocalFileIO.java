// A FileIO for local paths and file: URIs, on Iceberg's own local input and output files.
// JdbcCatalog's default is HadoopFileIO, and there is no Hadoop on this classpath.
// Object-store locations (s3://bucket/key) keep the catalog's own metadata files under a local
// directory instead: the local catalog has no object-store client, and only it reads them.
package org.apache.iceberg.rest;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.util.Map;
import org.apache.iceberg.Files;
import org.apache.iceberg.io.FileIO;
import org.apache.iceberg.io.InputFile;
import org.apache.iceberg.io.OutputFile;

public class LocalFileIO implements FileIO {
  static final String OBJECT_STORE_ROOT = "local.object-store-root";
  private String objectStoreRoot;

  public LocalFileIO() {}

  String localPath(String location) {
    if (location.startsWith("file:")) {
      return URI.create(location).getPath();
    }
    int scheme = location.indexOf("://");
    if (scheme > 0) {
      if (objectStoreRoot == null) {
        throw new IllegalArgumentException("The local catalog only stores local paths, not " + location);
      }
      return objectStoreRoot + "/" + location.substring(0, scheme) + "/" + location.substring(scheme + 3);
    }
    return location;
  }

  @Override
  public void initialize(Map<String, String> properties) {
    objectStoreRoot = properties.get(OBJECT_STORE_ROOT);
  }

  @Override
  public InputFile newInputFile(String location) {
    return Files.localInput(localPath(location));
  }

  @Override
  public OutputFile newOutputFile(String location) {
    File file = new File(localPath(location));
    File parent = file.getParentFile();
    if (parent != null && !parent.isDirectory() && !parent.mkdirs() && !parent.isDirectory()) {
      throw new UncheckedIOException(new IOException("Cannot create directory " + parent));
    }
    return Files.localOutput(file);
  }

  @Override
  public void deleteFile(String location) {
    try {
      java.nio.file.Files.deleteIfExists(new File(localPath(location)).toPath());
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
