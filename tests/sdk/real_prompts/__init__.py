"""Real system prompts from public sources, their run-time slots marked: the corpus of issue 52.

Each file of `prompts/` is one prompt, as its product sends it: a header (`id`; `source`: the
repository, path and commit it was read from; `kind`; `model`, where the product has a variant of
the prompt per model; `kept`: the source lines kept, trimmed to a
few KB with the start kept, never rewritten; `note`; one `stable:` line per look-alike that must
never move: versions, knowledge cutoffs, policy and example dates), a line `---`, then the prompt,
in which each value the product writes at run time is a slot: `⟦name⟧`, or `⟦date:FORMAT⟧` (the
run's local time in strftime's FORMAT; `%-d`, `%-m`, `%-I` without padding; `⟦yesterday:FORMAT⟧` the
day before). `render` fills the slots for one of two users, on one of three days, in a session of
its own: the days are yesterday, today and tomorrow by the clock, each at its own time of day in the
user's zone, as a product writes the date of the machine it runs on.
"""

from __future__ import annotations

import datetime
import hashlib
import re
import uuid
import zoneinfo
from dataclasses import dataclass
from functools import cache
from pathlib import Path

PROMPTS = Path(__file__).parent / "prompts"
DEFAULT_MODEL = "gpt-5.4"  # where a header names none: a product that sends its variants to their models names each
SLOT = re.compile(r"⟦(?P<name>[a-z_0-9]+)(?::(?P<format>[^⟧]+))?⟧")
DAYS = (1, 2, 3)
TIMES = {1: (9, 14, 7), 2: (15, 2, 51), 3: (19, 5, 51)}  # each day's time of day, local
_ZONE_NAMES = {
    "PST": "Pacific Standard Time",
    "PDT": "Pacific Daylight Time",
    "CET": "Central European Standard Time",
    "CEST": "Central European Summer Time",
}


@dataclass(frozen=True)
class User:
    """What a product writes about its user and machine (constant over days)."""

    login: str
    name: str
    email: str
    zone: str
    location: str
    country: str
    platform: str
    os_name: str
    os_version: str
    kernel: str
    os_release: str
    shell: str
    project: str
    repo_url: str
    tools: str
    files: tuple[str, ...]

    @property
    def home(self) -> str:
        return f"/Users/{self.login}" if self.platform == "darwin" else f"/home/{self.login}"

    @property
    def cwd(self) -> str:
        return f"{self.home}/code/{self.project}"


USERS = {
    "maria": User(
        login="maria",
        name="Maria Lopez",
        email="maria.lopez@fastmail.com",
        zone="America/Los_Angeles",
        location="San Francisco, California, US",
        country="United States",
        platform="darwin",
        os_name="macOS",
        os_version="Darwin 24.6.0",
        kernel="24.6.0",
        os_release="15.6.1",
        shell="/bin/zsh",
        project="invoice-api",
        repo_url="https://github.com/mlopez/invoice-api",
        tools="git, curl, gh, node, python3",
        files=(".github/", "src/", "tests/", ".env.example", "package.json", "README.md", "tsconfig.json"),
    ),
    "jonas": User(
        login="jonas",
        name="Jonas Weber",
        email="jonas@weber-consulting.de",
        zone="Europe/Berlin",
        location="Berlin, Germany",
        country="Germany",
        platform="linux",
        os_name="Linux",
        os_version="Linux 6.8.0-52-generic",
        kernel="6.8.0-52-generic",
        os_release="Ubuntu 24.04.1 LTS",
        shell="/bin/bash",
        project="weather-dash",
        repo_url="https://gitlab.com/jweber/weather-dash",
        tools="git, curl, docker, python3",
        files=("app/", "migrations/", "static/", "Dockerfile", "pyproject.toml", "README.md"),
    ),
}
_CHANGES = {  # a user's working tree and history on each day: what `git status` and `git log` show
    ("maria", 1): (
        (" M src/routes/invoices.ts",),
        ("a41c9e2 Validate currency codes", "77f03bd Add invoice PDF export"),
    ),
    ("maria", 2): (
        (" M src/routes/invoices.ts", " M src/pdf/render.ts", "?? src/pdf/fonts.ts"),
        ("c0d9b31 Embed fonts in exported PDFs", "a41c9e2 Validate currency codes"),
    ),
    ("maria", 3): (
        (" M tests/pdf.test.ts",),
        ("5e8aa70 Paginate long invoices", "c0d9b31 Embed fonts in exported PDFs"),
    ),
    ("jonas", 1): (
        (" M app/forecast.py", "?? app/cache.py"),
        ("9f2e441 Cache forecast responses", "1b7d0c3 Show wind gusts"),
    ),
    ("jonas", 2): (
        (" M app/forecast.py",),
        ("e03a8d5 Retry the upstream API once", "9f2e441 Cache forecast responses"),
    ),
    ("jonas", 3): (
        (" D static/old.css", " M app/views.py"),
        ("4c1f9ab Drop the legacy stylesheet", "e03a8d5 Retry the upstream API once"),
    ),
}


@dataclass(frozen=True)
class RealPrompt:
    """One prompt of the corpus (see the module)."""

    id: str
    source: str
    kind: str
    model: str
    template: str
    stable: tuple[str, ...]

    @property
    def slotted(self) -> bool:
        return SLOT.search(self.template) is not None

    @property
    def stable_bytes(self) -> int:
        """The bytes of the prompt that never change: the template without its slots."""
        return len(SLOT.sub("", self.template).encode())

    def render(self, user: str, day: int, session: int | None = None) -> str:
        """The prompt as the product writes it for `user` on `day` (1, 2, 3) in its own session
        (`session`: one per user and day unless given)."""
        values = slot_values(user, day, day if session is None else session)
        return SLOT.sub(lambda slot: _fill(slot, values, user, day), self.template)

    def spans(self, user: str, day: int, session: int | None = None) -> list[tuple[int, int]]:
        """Where the slots' values stand in `render(user, day, session)`: each line of a block (a
        listing, a `git status`) a value of its own."""
        values = slot_values(user, day, day if session is None else session)
        spans: list[tuple[int, int]] = []
        shift = 0
        for slot in SLOT.finditer(self.template):
            value = _fill(slot, values, user, day)
            start = slot.start() + shift
            for line in value.split("\n"):
                spans.append((start, start + len(line)))
                start += len(line) + 1
            shift += len(value) - len(slot[0])
        return spans


def run_time(user: str, day: int) -> datetime.datetime:
    """The local time of `user`'s run on `day`: yesterday, today, tomorrow (by the UTC clock)."""
    today = datetime.datetime.now(datetime.UTC).date() + datetime.timedelta(days=day - 2)
    return datetime.datetime(
        today.year, today.month, today.day, *TIMES[day], tzinfo=zoneinfo.ZoneInfo(USERS[user].zone)
    )


def slot_values(user: str, day: int, session: int) -> dict[str, str]:
    """The value of every named slot for `user` on `day` in `session` (dates are formatted apart)."""
    who = USERS[user]
    status, commits = _CHANGES[(user, day)]
    files = who.files + (("CHANGELOG.md",) if day == 3 else ())  # a file appears on the third day
    sid = uuid.UUID(bytes=hashlib.blake2b(f"{user}/{session}".encode(), digest_size=16).digest(), version=4)
    stamp = int(run_time(user, day).timestamp() * 1000)
    win_home = f"C:\\Users\\{who.login}"
    return {
        "user": who.login,
        "name": who.name,
        "email": who.email,
        "tz": who.zone,
        "location": who.location,
        "country": who.country,
        "platform": who.platform,
        "os_name": who.os_name,
        "os_version": who.os_version,
        "kernel": who.kernel,
        "os_release": who.os_release,
        "shell": who.shell,
        "shell_name": who.shell.rsplit("/", 1)[1],
        "shell_title": who.shell.rsplit("/", 1)[1].capitalize(),
        "home": who.home,
        "cwd": who.cwd,
        "winhome": win_home,
        "wincwd": f"{win_home}\\code\\{who.project}",
        "wincwd_fwd": f"c:/Users/{who.login}/code/{who.project}",
        "repo_url": who.repo_url,
        "repo_name": who.repo_url.split("/", 3)[3],
        "tools": who.tools,
        "user_id": str(uuid.UUID(bytes=hashlib.blake2b(who.login.encode(), digest_size=16).digest(), version=4)),
        "user_url": f"https://www.notion.so/{who.name.lower().replace(' ', '-')}",
        "branch": "main",
        "git_status": "\n".join(status),
        "commits": "\n".join(commits),
        "open_files": "\n".join(line[3:] for line in status),
        "listing": "\n".join(f"├ {name}" for name in files[:-1]) + f"\n└ {files[-1]}",
        "listing_flat": "\n".join(files),
        "listing_inline": ", ".join(files),
        "session": str(sid),
        "tmpdir": f"/tmp/claude-history-{stamp}-{sid.hex[:6]}",
        "host1": f"https://work-1-{sid.hex[:12]}.prod-runtime.all-hands.dev",
        "port1": "12000",
        "host2": f"https://work-2-{sid.hex[:12]}.prod-runtime.all-hands.dev",
        "port2": "12001",
    }


def _fill(slot: re.Match[str], values: dict[str, str], user: str, day: int) -> str:
    name, form = slot["name"], slot["format"]
    when = run_time(user, day)
    if name in ("date", "yesterday"):
        when -= datetime.timedelta(days=name == "yesterday")
        for code, value in (("%-d", when.day), ("%-m", when.month), ("%-I", when.hour % 12 or 12)):
            form = form.replace(code, str(value))
        return when.strftime(form)
    if name == "tz_long":
        return _ZONE_NAMES[when.strftime("%Z")]
    return values[name]


@cache
def corpus() -> tuple[RealPrompt, ...]:
    """Every prompt of `prompts/`, by id."""
    prompts = []
    for path in sorted(PROMPTS.glob("*.txt")):
        head, text = path.read_text(encoding="utf-8").split("\n---\n", 1)
        fields: dict[str, list[str]] = {}
        for line in head.split("\n"):
            key, value = line.split(": ", 1)
            fields.setdefault(key, []).append(value)
        model = fields.get("model", [DEFAULT_MODEL])[0]
        stable = tuple(fields.get("stable", ()))
        prompts.append(
            RealPrompt(fields["id"][0], fields["source"][0], fields["kind"][0], model, text.rstrip("\n"), stable)
        )
    return tuple(prompts)
