"""The live region (`spotcap demo --live`): spotcap's live topology, every service a real
process on real servers, over the simulated region served as a cloud, for a span of sim time
with a hall-wide wave and a misbehaving pool; then the demo's summary from the log.

What it owns: the scenario (`scenario`), the tap that writes the served region's own facts
and the simulated node agents' drains to the log (`tap`), the real agents of a few nodes
(`agents`), the servers and services as processes (`processes`), and the run (`run`). What
it may import: what `sim` may. Who calls it: the command line (`spotcap demo --live`) and
tests/test_live_region.py.
"""

from sim.live.agents import RealAgents
from sim.live.processes import LiveError
from sim.live.run import LiveConfig, live_lines, region_events, run_live
from sim.live.scenario import OWNER, WAVE_ID, Scenario
from sim.live.tap import RegionTap, SimulatedAgents

__all__ = [
    "OWNER",
    "WAVE_ID",
    "LiveConfig",
    "LiveError",
    "RealAgents",
    "RegionTap",
    "Scenario",
    "SimulatedAgents",
    "live_lines",
    "region_events",
    "run_live",
]
