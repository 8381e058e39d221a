"""The capacity-provider seam (`provider.base`) and its implementations: `provider.sim`, a
deterministic discrete-event simulator of a region, and `provider.openstack`, the organisation's
OpenStack cloud through openstacksdk; `provider.notices` is the notice delivery path."""
