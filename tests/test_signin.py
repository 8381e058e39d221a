"""Sign-in (OIDC) for `spotcap serve`, with OpenBao's identity tokens as the issuer: every route
of the app (taken from its routing table, so that a new one cannot escape) against every role
with a valid token, and against tokens that are missing, expired, for another audience, from
another issuer, or forged; a workload owner's view (another team's workload is a missing one);
where the server refuses to start without an issuer; and no secret of the suite in any log,
error sentence or `--json` output."""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route

from console.access import ReadAccess
from console.app import API_ROUTERS, PAGE_ROUTERS, create_app
from console.roles import AREAS
from infra import servers
from projections.stores import Stores
from spotcap.config import Settings
from spotcap.wiring import stores
from streams.embedded import EmbeddedLog
from tests.serve_support import Reply, Served, Story, send, spotcap, write_story
from tests.signin_support import Issuer, new_issuer, self_signed, tampered, unsigned

pytestmark = pytest.mark.slow

# Every route and the roles that may use it: the promise of docs/security.md, written out here
# apart from the server's own table (console.roles), which must agree with it.
SRE, OWNER, FINANCE, AUDITOR = "sre", "owner", "finance", "auditor"
MATRIX: dict[tuple[str, str], set[str]] = {
    ("GET", "/api/v1/pools"): {SRE},
    ("GET", "/api/v1/rankings"): {SRE},
    ("GET", "/api/v1/exclusions"): {SRE},
    ("GET", "/api/v1/lag"): {SRE},
    ("GET", "/api/v1/waves/last"): {SRE},
    ("GET", "/metrics"): {SRE},
    ("GET", "/"): {SRE},
    ("GET", "/api/v1/instances"): {SRE, OWNER},
    ("GET", "/api/v1/workloads"): {SRE, OWNER},
    ("GET", "/api/v1/workloads/{id}/spread"): {SRE, OWNER},
    ("GET", "/api/v1/fallbacks"): {SRE, OWNER},
    ("GET", "/api/v1/why/{id}"): {SRE, OWNER},
    ("GET", "/workloads"): {SRE, OWNER},
    ("GET", "/workloads/{workload_id}"): {SRE, OWNER},
    ("GET", "/why"): {SRE, OWNER},
    ("GET", "/api/v1/reports/savings"): {SRE, OWNER, FINANCE, AUDITOR},
    ("GET", "/api/v1/reports/savings/daily"): {SRE, OWNER, FINANCE, AUDITOR},
    ("GET", "/savings"): {SRE, FINANCE, AUDITOR},
    ("GET", "/api/v1/reports/what-if"): {FINANCE},
    ("GET", "/api/v1/archive"): {AUDITOR},
    ("POST", "/api/v1/archive/verify"): {AUDITOR},
    ("GET", "/archive"): {AUDITOR},
    ("POST", "/archive/verify"): {AUDITOR},
    ("GET", "/api/v1/health"): {SRE, OWNER, FINANCE, AUDITOR},
}
PUBLIC = {"/openapi.json", "/static"}  # the description and the stylesheet: no data
# What a permitted request answers on this home: 200, but for verify with no archive key
# (409, saying how to start the server with one) and the last wave of a history without one.
ANSWER = {("POST", "/api/v1/archive/verify"): 409, ("POST", "/archive/verify"): 409}
ANSWER[("GET", "/api/v1/waves/last")] = 404  # saying that this history has no wave
GROUPS = {
    SRE: ["spotcap-sre"],
    FINANCE: ["spotcap-finance"],
    AUDITOR: ["spotcap-auditor"],
    "nobody": [],  # signed in, but in no spotcap group
}
MISSING = "no-such-workload-anywhere"


def app_routes(tmp: Path) -> tuple[set[tuple[str, str]], set[str]]:
    """The app's routes, from its public route list (`app.routes`) and the public routes of the
    routers it includes (`console.app.API_ROUTERS`, `PAGE_ROUTERS`): (method, path) of each
    API route and page, and the paths of the others (the OpenAPI description, the mounted
    assets). An entry of `app.routes` that is none of these is an included router: there must
    be exactly one per router listed, so a router included and not listed fails the test."""
    app = create_app(ReadAccess(Stores(tmp), "dev", lambda: EmbeddedLog(tmp / "log")))
    routers = (*API_ROUTERS, *PAGE_ROUTERS)
    routed: set[tuple[str, str]] = set()
    others: set[str] = set()
    included = 0
    for entry in app.routes:
        if isinstance(entry, APIRoute):
            routed |= {(m, entry.path_format) for m in entry.methods or ()}
        elif isinstance(entry, (Route, Mount)):
            others.add(entry.path)
        else:
            included += 1
    assert included == len(routers), "the app includes a router that the test does not read"
    for router in routers:
        for route in router.routes:
            assert isinstance(route, APIRoute), f"{route!r}: not an API route or page"
            routed |= {(m, route.path_format) for m in route.methods or ()}
    return routed, others


class Site:
    """The signed-in server, its issuer and people, and every answer it gave (for the scan)."""

    def __init__(
        self, served: Served, issuer: Issuer, story: Story, team: str, theirs: str
    ) -> None:
        self.served, self.issuer, self.story, self.team = served, issuer, story, team
        self.theirs = theirs  # a workload of another team
        self.replies: list[Reply] = []
        self.tokens = {role: issuer.token(role) for role in [*GROUPS, OWNER, "other-owner"]}

    def ask(self, method: str, path: str, token: str | None = None) -> Reply:
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        data = b"" if method == "POST" else None
        reply = send(
            urllib.request.Request(
                self.served.url + path, data=data, headers=headers, method=method
            )
        )
        self.replies.append(reply)
        return reply

    def url_of(self, route: tuple[str, str]) -> str:
        """A request of each route that a permitted role (an owner too) gets rows for."""
        own = self.story.workload
        return {
            "/api/v1/instances": f"/api/v1/instances?workload={own}",
            "/api/v1/workloads/{id}/spread": f"/api/v1/workloads/{own}/spread",
            "/api/v1/fallbacks": f"/api/v1/fallbacks?workload={own}",
            "/api/v1/why/{id}": f"/api/v1/why/{own}",
            "/workloads/{workload_id}": f"/workloads/{own}",
            "/why": f"/why?id={own}",
            "/api/v1/reports/savings": f"/api/v1/reports/savings?workload={own}",
            "/api/v1/reports/savings/daily": f"/api/v1/reports/savings/daily?workload={own}",
            "/api/v1/reports/what-if": "/api/v1/reports/what-if?rule=flat-guaranteed-rate",
        }.get(route[1], route[1])


@pytest.fixture(scope="module")
def issuer(openbao: servers.Server) -> Issuer:
    return new_issuer(openbao)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("signin-home")
    done = spotcap(root, "demo", "--days", "1", "--workloads", "40", "--orchestrator", "baseline")
    assert done.returncode == 0, done.stderr[-3000:]
    try:
        yield root
    finally:
        stores(Settings.load(home=root, region="dev")).stop_embedded_postgres()


@pytest.fixture(scope="module")
def site(home: Path, issuer: Issuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    story = write_story(Settings.load(home=home, region="dev"))
    conn = stores(Settings.load(home=home, region="dev")).open_fleet()
    try:
        # Another team's workload with capacity running now (so that there is much to hide).
        (team,) = conn.execute(
            "SELECT owner FROM workloads WHERE workload_id = %s", (story.workload,)
        ).fetchone() or ("",)
        (theirs, other_team) = conn.execute(
            "SELECT w.workload_id, w.owner FROM workloads w JOIN instances i USING (workload_id)"
            " WHERE w.owner <> %s AND i.state = 'running' ORDER BY 1 LIMIT 1",
            (team,),
        ).fetchone() or ("", "")
    finally:
        conn.close()
    assert team and theirs
    for role, groups in GROUPS.items():
        issuer.person(role, groups)
    issuer.person(OWNER, [f"spotcap-owner-{team}"])
    issuer.person("other-owner", [f"spotcap-owner-{other_team}"])
    logs = tmp_path_factory.mktemp("signin-logs")
    # The access log on (info), so that the scan for secrets reads every request's line.
    served = Served(home, logs, "--oidc-issuer", issuer.url, "--oidc-audience", issuer.audience)
    try:
        yield Site(served, issuer, story, team, theirs)
    finally:
        code = served.stop()
        assert code == 0, f"spotcap serve exited {code}:\n{served.err.read_text()[-3000:]}"


def test_the_matrix_covers_every_route_of_the_app(tmp_path: Path) -> None:
    routed, others = app_routes(tmp_path)
    assert routed == set(MATRIX), "a route is missing from the matrix (or the matrix is stale)"
    assert set(AREAS) == routed, "the server's own table (console.roles) misses a route"
    assert others == PUBLIC


def test_each_role_reaches_its_routes_and_no_other(site: Site) -> None:
    wrong: list[str] = []
    for route, roles in sorted(MATRIX.items()):
        method, url = route[0], site.url_of(route)
        for role in [SRE, OWNER, FINANCE, AUDITOR, "nobody"]:
            reply = site.ask(method, url, site.tokens[role])
            want = ANSWER.get(route, 200) if role in roles else 403
            if reply.status != want:
                wrong.append(
                    f"{role} {method} {url}: {reply.status}, not {want}: {reply.text[:200]}"
                )
            elif want == 403 and route[1].startswith(("/api/", "/metrics")):
                assert reply.content_type == "application/problem+json"
                assert "group" in reply.json()["detail"]
            elif want == 403:
                assert reply.content_type.startswith("text/html") and "group" in reply.text
    assert not wrong, "\n".join(wrong)


def bad_tokens(site: Site) -> dict[str, str]:
    good = site.tokens[SRE]
    forged_key, pem = self_signed(good)
    site.issuer.secrets.append(pem)
    return {
        "no token": "",
        "not a JWT": "not-a-token",
        "expired": site.issuer.expired(SRE),
        "another audience": site.issuer.token(SRE, "other-app"),
        "another issuer": site.issuer.from_another_issuer(SRE),
        "claims changed under the signature": tampered(
            site.tokens["nobody"], groups=["spotcap-sre"]
        ),
        "signed by a key the issuer never published": forged_key,
        "unsigned (alg none)": unsigned(good),
    }


def test_every_route_refuses_a_bad_token_with_401(site: Site) -> None:
    wrong: list[str] = []
    sentences: set[str] = set()
    for kind, token in bad_tokens(site).items():
        for route in sorted(MATRIX):
            reply = site.ask(route[0], site.url_of(route), token or None)
            if (
                reply.status != 401
                or "bearer" not in reply.headers.get("www-authenticate", "").lower()
            ):
                wrong.append(f"{kind}: {route}: {reply.status} {reply.text[:200]}")
            elif route[1].startswith("/api/"):
                sentences.add(f"{kind}: {reply.json()['detail']}")
    assert not wrong, "\n".join(wrong)
    said = "\n".join(sorted(sentences))
    assert "expired: the token has expired" in said
    assert "another audience: the token is for another audience" in said
    assert "another issuer: the token is from another issuer" in said
    assert "no token: sign in: send a token" in said
    forged = ("claims changed", "signed by a key the issuer never", "unsigned (alg none)")
    lines = [line for line in said.splitlines() if line.startswith(forged)]
    assert len(lines) == 3 and all("not valid (its signature or claims)" in x for x in lines)


def test_the_description_and_stylesheet_need_no_sign_in(site: Site) -> None:
    assert site.ask("GET", "/openapi.json").status == 200
    assert site.ask("GET", "/static/console.css").status == 200


def _same(a: Reply, a_id: str, b: Reply, b_id: str) -> None:
    assert (a.status, a.content_type) == (b.status, b.content_type)
    assert a.text.replace(a_id, "ID") == b.text.replace(b_id, "ID")


def test_an_owner_sees_their_teams_workloads_only(site: Site) -> None:
    every = site.ask("GET", "/api/v1/workloads?limit=10000", site.tokens[SRE]).json()
    own = site.ask("GET", "/api/v1/workloads?limit=10000", site.tokens[OWNER]).json()
    assert own and own == [w for w in every if w["owner"] == site.team]
    theirs = site.theirs
    token = site.tokens[OWNER]
    shown = 0  # answers in which the SRE sees something of theirs that the owner does not
    # Another team's workload answers exactly as one that does not exist.
    for path in [
        "/api/v1/workloads/{}/spread",
        "/api/v1/why/{}",
        "/workloads/{}",
        "/why?id={}",
        "/api/v1/instances?workload={}",
        "/api/v1/fallbacks?workload={}",
        "/api/v1/reports/savings?workload={}",
        "/api/v1/reports/savings/daily?workload={}",
    ]:
        hidden = site.ask("GET", path.format(theirs), token)
        missing = site.ask("GET", path.format(MISSING), token)
        _same(hidden, theirs, missing, MISSING)
        seen_by_sre = site.ask("GET", path.format(theirs), site.tokens[SRE])
        assert seen_by_sre.status == 200
        shown += seen_by_sre.text != missing.text.replace(MISSING, theirs)
    assert shown >= 6  # all but the fallbacks and savings rows they may not have
    # ... and so does an instance of it, in `why`.
    (instance,) = site.ask(
        "GET", f"/api/v1/instances?workload={theirs}&limit=1", site.tokens[SRE]
    ).json()
    _same(
        site.ask("GET", f"/api/v1/why/{instance['instance_id']}", token),
        instance["instance_id"],
        site.ask("GET", f"/api/v1/why/{MISSING}", token),
        MISSING,
    )
    mine = site.ask("GET", f"/api/v1/why/{site.story.lost_instance}", token)
    assert mine.status == 200 and mine.json()["kind"] == "instance"
    # Rows of every workload at once are not an owner's: one workload at a time.
    refused = site.ask("GET", "/api/v1/instances", token)
    assert refused.status == 403 and "workload=ID" in refused.json()["detail"]
    # The other team's owner sees the reverse.
    other = site.ask("GET", f"/api/v1/workloads/{theirs}/spread", site.tokens["other-owner"])
    assert other.status == 200


def test_what_if_on_the_savings_page_is_finances(site: Site) -> None:
    path = "/savings?rule=flat-guaranteed-rate"
    assert site.ask("GET", path, site.tokens[FINANCE]).status == 200
    refused = site.ask("GET", path, site.tokens[AUDITOR])
    assert refused.status == 403 and "finance" in refused.text


def test_serving_beyond_loopback_needs_an_issuer(tmp_path: Path) -> None:
    done = spotcap(tmp_path / "none", "serve", "--host", "0.0.0.0", "--port", "0")
    assert done.returncode == 2, done.stderr
    assert "needs sign-in" in done.stderr and "--oidc-issuer URL --oidc-audience ID" in done.stderr
    half = spotcap(tmp_path / "none", "serve", "--oidc-issuer", "http://127.0.0.1:1/x")
    assert half.returncode == 2 and "go together" in half.stderr


def test_loopback_without_an_issuer_serves_everyone_and_says_so(
    home: Path, site: Site, tmp_path: Path
) -> None:
    served = Served(home, tmp_path)
    try:
        assert served.get("/api/v1/pools").status == 200
        assert "no sign-in" in served.err.read_text()
    finally:
        assert served.stop() == 0


def leaks(secrets: list[str], texts: list[str], folder: Path, skip: Path) -> list[str]:
    """Where any of `secrets` occurs: in `texts` (by number), or in a log or output file under
    `folder` but not under `skip`."""
    found = [f"answer {n}" for n, text in enumerate(texts) for s in secrets if s in text]
    for path in folder.rglob("*"):
        if not path.is_file() or skip in path.resolve().parents:
            continue
        if re.search(r"\.(log|out|err|json|txt|ndjson)$", path.name) or path.name.endswith("log"):
            text = path.read_bytes().decode(errors="replace")
            found += [str(path) for s in secrets if s in text]
    return sorted(set(found))


def test_no_secret_reaches_a_log_an_error_or_json(
    site: Site, tmp_path_factory: pytest.TempPathFactory, openbao: servers.Server
) -> None:
    """Last but one in the module: every token, password and key the tests made, looked for in
    every answer the server gave, in `spotcap` outputs (an error sentence, `--json`), and in
    every log and output file under the suite's temporary folder (the servers' logs, the
    access log of every request above) but OpenBao's own, which holds its root token by
    design."""
    secrets = [s for s in site.issuer.secrets if len(s) >= 16]
    assert len(secrets) > 10 and len(site.replies) > 100
    texts = [f"{r.headers}\n{r.text}" for r in site.replies]
    nowhere = site.served.out.parent / "nowhere"
    for args in (["serve", "--host", "0.0.0.0"], ["query", "workloads", "--json"]):
        done = spotcap(nowhere, *args)
        texts += [done.stdout, done.stderr]
    assert "GET /api/v1/pools" in site.served.err.read_text()  # the access log was written
    base = tmp_path_factory.getbasetemp().resolve()
    assert not leaks(secrets, texts, base, Path(openbao.data_dir).resolve())


def test_the_scan_finds_a_secret_where_there_is_one(site: Site, tmp_path: Path) -> None:
    """The scan above can fail: a token in a log file or in an answer is found."""
    token = site.tokens["nobody"]
    leak = tmp_path / "serve.err"
    leak.write_text(f"Authorization: Bearer {token}\n")
    try:
        assert leaks([token], [], tmp_path, tmp_path / "skip") == [str(leak)]
        assert leaks([token], ["ok", f"detail: {token}"], tmp_path / "skip", tmp_path) == [
            "answer 1"
        ]
    finally:
        leak.unlink()
