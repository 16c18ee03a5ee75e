"""The table lifecycle: declare, describe, register, rename, drop; where data is placed and
proven owned; the trash of soft-deleted tables and their tombstones."""
