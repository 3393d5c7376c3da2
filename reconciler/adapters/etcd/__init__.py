"""etcd through tooz: the cluster's lease for sites that run etcd."""
