"""The node agent (docs/agent.md): it acts within 2 s of a notice from what the node already
holds, with no control plane.

What it owns: notice intake (NATS + metadata poll), the signed bundle, the drain paths
(Kubernetes, Slurm, local) and their verification, the spool, the agent's metrics, the service
that runs it all (`service`), and the embedded shipper (`ship`) that puts the spool on the log
where no Vector runs.

What it may import: `schemas`, `contracts`; nats-py, kubernetes, prometheus-client. Only `ship`
may import `streams`: the node's own path never touches the log. Who calls it: `spotcap agent`.
"""
