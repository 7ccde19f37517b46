"""Where the servers of a run's nodes are: node name -> endpoint, and the CURVE public key that
proves each server (none on loopback); for a rank of `paths launch`, also the CURVE key pair it
presents to them (its node's: the node servers of a CURVE run admit only the run's nodes).

A process of a run (a node of `paths run`, a rank of `paths launch`, srun or mpirun) gives its
resolve to the build contexts it builds in: a `remote(host=NODE)` stage in their paths then
reaches NODE's server, and an `allreduce(nodes="N0,N1,...")` stage the servers of its members.
"""

from __future__ import annotations

import json
from typing import Mapping

from ..model.stage_kinds import KindInfo


class NodeServers:
    def __init__(self, endpoints: Mapping[str, str], keys: Mapping[str, str] | None = None,
                 client: tuple[str, str] | None = None):
        self.endpoints = dict(endpoints)
        self.keys = dict(keys or {})  # node -> its server's CURVE public key
        self.client = tuple(client) if client else None  # (public, secret) presented to them, or None

    def resolve(self, params: dict, info: KindInfo) -> dict:
        """A stage's parameters with the nodes it reaches turned into their servers' endpoints and
        keys: where its rest is built (a remote stage's host), the nodes it names (an allreduce
        stage's members). A name that is no node is left as it is: an endpoint of the user's own."""
        params = dict(params)
        if info.rest_at is not None:
            node = params[info.rest_at]
            params[info.rest_at] = self.endpoints.get(node, node)
            if self.keys.get(node) and not params.get("curve_server_key"):
                params["curve_server_key"] = self.keys[node]
        for name in info.node_params:
            nodes = params.get(name, "").split(",") if params.get(name) else []
            params[name] = ",".join(self.endpoints.get(node, node) for node in nodes)
            if any(self.keys.get(node) for node in nodes) and not params.get("curve_server_keys"):
                params["curve_server_keys"] = ",".join(self.keys.get(node, "") for node in nodes)
        return params

    def to_dict(self) -> dict:
        return {"endpoints": self.endpoints, "keys": self.keys, **({"client": list(self.client)} if self.client else {})}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str, what: str) -> "NodeServers":
        """The servers `to_json` wrote; ValueError naming `what` (where the text came from)."""
        try:
            found = json.loads(text)
            endpoints, keys, client = found["endpoints"], found.get("keys", {}), found.get("client") or []
            if not all(isinstance(v, str) for v in [*endpoints.values(), *keys.values(), *client]) or \
                    len(client) not in (0, 2):
                raise TypeError
        except (ValueError, TypeError, KeyError, AttributeError):
            got = "text with a client key, not shown" if "client" in text else repr(text[:200])
            raise ValueError(f"{what}: expected the servers as JSON {{\"endpoints\": {{node: endpoint}}, "
                             f"\"keys\": {{node: key}}, \"client\": [public, secret]}}, got {got}") from None
        return cls(endpoints, keys, client)
