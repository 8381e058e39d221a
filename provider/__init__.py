"""The capacity-provider seam (`provider.base`) and its implementations: `provider.sim`, a
deterministic discrete-event simulator of a region (and, later, `provider.openstack`)."""
