"""etcd, below metadata and cluster (issue 26, part 3): ``client`` (connection, URL parsing,
error classification, the lease's keep-alive thread) and ``session`` (this broker's lease and
what rides on it: ephemeral keys, the election key and its revision fence). Nothing else in Shoal
builds etcd's RPC messages."""
