"""The capacity-provider seam (`provider.base`: the five provider commitments, launch, delete
and list-by-tag) and its adapter for the organisation's OpenStack cloud (`provider.openstack`,
through openstacksdk); `provider.notices` is the notice delivery path (NATS relay, metadata
endpoint).

What it may import: `schemas`, `contracts`; openstacksdk, keystoneauth1, requests, nats-py,
pydantic, PyYAML. Who calls it: the simulated region (which implements the seam), and the
command line's `spotcap notices`.
"""
