"""Dates as products write them, and which of them say "now": by the caller's words or by their value.

A date alone ("Founded on 2019-05-01", "effective January 1, 2025") is the caller's content and
stays. A date that names the current day changes every day, and moves on first sight
(`sdk.prompt.first_sight`), in any common written form: ISO `2026-03-17`, `2026/03/17`,
`3/17/2026`, `17/03/2026` (`17.03.2026`), `March 17, 2026`, `Mar. 17th 2026`, `17 March 2026`,
`the 17th of March, 2026`, each with or without a weekday before it (`Tue Mar 17 2026`,
`Tuesday, March 17, 2026`) and a time of day after it (seconds, AM/PM, a zone or an offset). It
names the current day when:
- a lead-in introduces it as the current one, just before it in its sentence: "The current date
  is", "Today is", "today's date is", "use the current date of", "It is now", "as of" (`NOW_LEAD_IN`),
  unless its clause speaks of something else's date (a knowledge cutoff, a policy, a release:
  `_STABLE_CUE`); so does a time of day alone ("The current time is 7:05 PM PDT.");
- or it is the whole line under a heading that names it (`### Current Date`, `**Today:**`);
- or its value is today's: within a day of the process's clock in UTC, so today in every time
  zone. A stable document's dates are rarely today's: a policy date written today costs one
  cache miss tomorrow, never a wrong answer.
A labelled date (`Date: 3/17/2026`, `- date: 2026-03-17`) is found as a labelled value
(`sdk.prompt.volatile`), whose label says "now" (`NOW_LABEL`).
"""

from __future__ import annotations

import datetime
import re

DAY = (
    r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday"
    r"|Mon|Tues|Tue|Wed|Thurs|Thur|Thu|Fri|Sat|Sun)"
)
MONTH = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November|December"
    r"|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?"
)
TIME = r"(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d(?:[.,]\d{1,9})?)?"
AMPM = r"(?:[ ]?[AaPp](?:\.[Mm]\.|[Mm]))"
ZONE = (
    r"(?:[ ]?(?:Z|[+-](?:[01]\d|2[0-3]):?[0-5]\d|(?:UTC|GMT)(?:[+-]\d{1,2}(?::?\d\d)?)?"
    r"|[A-Z]{2,4}T(?:[+-](?:[01]\d|2[0-3]):?[0-5]\d)?))"
)
YMD = r"\d{4}-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12]\d|3[01])"
_ORDINAL = r"(?:st|nd|rd|th)?"
_DAY_OF_MONTH = r"(?:0?[1-9]|[12]\d|3[01])"
_YEAR = r"(?:19|20)\d\d"
CALENDAR_DATE = (
    rf"(?:{DAY}\.?,?[ ]+)?(?:{YMD}|\d{{4}}/\d{{1,2}}/\d{{1,2}}|\d{{1,2}}(?P<sep>[/.-])\d{{1,2}}(?P=sep){_YEAR}"
    rf"|{MONTH}[ ]+{_DAY_OF_MONTH}{_ORDINAL},?[ ]+{_YEAR}"
    rf"|(?:the[ ]+)?{_DAY_OF_MONTH}{_ORDINAL}[ ]+(?:of[ ]+)?{MONTH},?[ ]+{_YEAR})"
)
"""A date with its year, in any common written form (with a weekday before it or not)."""
DATE = re.compile(
    rf"(?<![\w./:-]){CALENDAR_DATE}(?:(?:T|,?[ ]+(?:at[ ]+)?){TIME}{AMPM}?{ZONE}?)?(?![\w-]|[./]\d)",
    re.ASCII,
)
"""A date in any written form, with the time of day that follows it: the whole of what the caller wrote."""
_NAMED_ZONE = r"(?:[ ]?(?:Z|UTC|GMT|[A-Z]{2,4}T)(?:[+-]\d{1,2}(?::?\d\d)?)?)"
TIME_OF_DAY = re.compile(
    rf"(?<![\w:.-]){TIME}{AMPM}?{_NAMED_ZONE}?(?![\w:]|[.,]\d|[ ]?(?:[-–+]|to|until|and)[ ]?\d)", re.ASCII
)
"""A time of day alone ("7:05 PM PDT"): the current time where a lead-in introduces it (`introduced_as_now`)."""

NOW_LEAD_IN = re.compile(
    r"(?:\b(?:current|today'?s|present|local)[ \t]+(?:date[ \t]*(?:and|&)[ \t]*time|date|time|datetime|day)"
    r"|\btoday[ \t]+is|\bit[ \t]+is[ \t]+(?:now|currently|today)|\b(?:the[ \t]+)?(?:date|time)[ \t]+(?:today[ \t]+)?is"
    r"|\bas[ \t]+of|\bright[ \t]+now|\bnow[ \t]+is)"
    r"[ \t]*(?:\([^()\n]{1,16}\)[ \t]*)?(?:(?:is|was|of|on|now)[ \t]+)*[:=,]?[ \t]*(?:\*\*|__)?[ \t]*[(\[]?$",
    re.IGNORECASE,
)
"""Words that introduce the date right after them as the current one ("The current date is", "as of")."""
_STABLE_CUE = re.compile(
    r"\b(?:knowledge|cut-?off|trained|training|effective|polic(?:y|ies)|released?|updated|revised|valid|price[sd]?"
    r"|rates?|expires?|deadline|since|until|founded|version|hours|open(?:s|ing)?|clos(?:e|es|ing)|office|business"
    r"|between|every|daily|schedul(?:e|ed|ing))\b",
    re.IGNORECASE,
)
_CLAUSE_END = re.compile(r"[.;!?](?:[ \t]|$)")
_NOW_HEADING = re.compile(
    r"[ \t]*(?:#{1,6}[ \t]+)?(?:\*\*|__)?(?:the[ \t]+)?(?:(?:current|today'?s|local)[ \t]+)?"
    r"(?:date[ \t]*(?:and|&)[ \t]*time|date|time|datetime|today|now)(?:\*\*|__)?[ \t]*:?(?:\*\*|__)?[ \t\r]*",
    re.IGNORECASE,
)
_LINE_AROUND = re.compile(r"[ \t]*(?:[-*+][ \t]+)?(?:\*\*|__)?[ \t]*(?P<date>.+?)[ \t]*(?:\*\*|__)?\.?[ \t\r]*")
NOW_LABEL = re.compile(
    r"(?:(?:current|local|server|today'?s?|system)[ _-]?)?(?:date[ _-]?(?:and[ _-]?|&[ _-]?)?time|datetime|date|time)"
    r"|today|now",
    re.IGNORECASE,
)
"""Labels that say their value is the current date or time (`Date:`, `- date:`, `Current time:`)."""
_MONTHS = {name: number for number, name in enumerate(("jan feb mar apr may jun jul aug sep oct nov dec").split(), 1)}
_NUMERIC = re.compile(r"(\d{1,4})[/.-](\d{1,2})[/.-](\d{1,4})", re.ASCII)
_MONTH_NAME = re.compile(r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)[a-z]*\.?", re.IGNORECASE)
_NUMBER = re.compile(r"\d+", re.ASCII)


def today() -> int:
    """Today in UTC as a proleptic ordinal (`datetime.date.toordinal`): what "within a day" is measured from."""
    return datetime.datetime.now(datetime.UTC).date().toordinal()


def introduced_as_now(line: str, start: int) -> bool:
    """Whether a lead-in just before `start` in `line` introduces what follows as the current date or
    time ("The current time is 7:05 PM"), in a clause that speaks of nothing else's date."""
    before = line[:start]
    if (lead := NOW_LEAD_IN.search(before)) is None:
        return False
    clause = before[: lead.start()]
    ends = [found.end() for found in _CLAUSE_END.finditer(clause)]
    return _STABLE_CUE.search(clause, ends[-1] if ends else 0) is None


def names_now(line: str, start: int, end: int, under_heading: bool, now: int) -> bool:
    """Whether the date at `start:end` of `line` (a match of `DATE`) names the current day (see the
    module); `under_heading`: a heading that names the current date stands above `line`
    (`now_heading`); `now` is `today()`."""
    if introduced_as_now(line, start):
        return True
    if under_heading and (whole := _LINE_AROUND.fullmatch(line)) is not None and whole.span("date") == (start, end):
        return True
    return any(abs(day - now) <= 1 for day in ordinals(line[start:end]))


def names_now_heading(line: str) -> bool:
    """Whether `line` is a heading that names the current date or time (`### Current Date`, `Today:`)."""
    return _NOW_HEADING.fullmatch(line) is not None


def now_heading(text: str, line_start: int) -> int | None:
    """Where the heading that names the current date or time above the line at `line_start` starts
    (the line just above, or the one above a blank line), None where there is none."""
    above = line_start - 1
    for _ in range(2):
        if above < 0:
            return None
        start = text.rfind("\n", 0, above) + 1
        line = text[start:above]
        if line.strip():
            return start if names_now_heading(line) else None
        above = start - 1
    return None


def ordinals(text: str) -> set[int]:
    """The days a written date can mean (`3/4/2026`: March 4 or April 3), as proleptic ordinals."""
    readings: list[tuple[int, int, int]] = []
    if (numeric := _NUMERIC.search(text)) is not None:
        first, second, third = (int(part) for part in numeric.groups())
        if len(numeric[1]) == 4:
            readings.append((first, second, third))
        else:
            readings += [(third, first, second), (third, second, first)]
    elif (month := _MONTH_NAME.search(text)) is not None:
        numbers = [int(number) for number in _NUMBER.findall(text[: month.start()] + " " + text[month.end() :])]
        years = [number for number in numbers if number >= 1000]
        of_month = [number for number in numbers if number < 100]
        if years and of_month:
            readings.append((years[0], _MONTHS[month[0][:3].lower()], of_month[0]))
    days: set[int] = set()
    for year, month_number, day in readings:
        try:
            days.add(datetime.date(year, month_number, day).toordinal())
        except ValueError:
            continue
    return days
