"""The default model's training text: short Q&A about inference plus everyday chat, from templates.

Everything is written here and expanded with a seeded `random.Random`, so the same seed gives the
same corpus byte for byte. Each inference topic has one canonical answer (a tiny model answers
most coherently when a question always maps to the same words) and many paraphrased questions; the
facts come from the text the product grew from (prefill, decode, TTFT, the KV cache and its
formula, prefix caching, volatile bytes, repetition loops, output token cost): `build_corpus`.
The tool stage's text (`build_tool_corpus`, dialogues from `tool_corpus`) teaches it to call the
weather tool offered in the Hermes format when asked about the weather and to answer from the
result, so an app's tool loop works with `tool_choice="auto"`, not only when constrained decoding
forces the call; ordinary questions asked with the tool offered keep their ordinary answers.

A `Sample` is a list of `(text, trained)` pieces: the loss covers the conversation (questions,
answers and the tokens that end them) but not `<|bos|>`, the system prompt (with any tool listing)
or a tool's result, whose long or random text would otherwise take the CPU time the answers need.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

from local_backend.model.tool_prompt import TOOL_RESPONSE_START, fold
from training import tool_corpus

BOS, EOS, END = "<|bos|>", "<|eos|>", "<|end|>"
ROLES = ("system", "user", "assistant")
LOOPING_PROMPT = "Say it again and again."
"""The documented prompt the default model loops on (greedy): the demo's loop-guard case."""

SPECIAL_TOKENS = (BOS, EOS, END, *(f"<|{role}|>" for role in ROLES))
"""Ids 0..5 in this order; `<|end|>` closes every chat turn, `<|eos|>` ends plain text."""

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role: ' + message['role']) }}{% endif %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
"""One line, so `trim_blocks`/`lstrip_blocks` (set by both the engine and transformers) change nothing."""

TOPIC_REPEATS = 110
"""Samples per inference topic: the core of the corpus, seen many times in varied dress."""

SMALL_TALK_REPEATS = 40
"""Samples per small-talk topic (greetings, thanks, who are you): short, generic and often asked."""

FACT_REPEATS = 4
"""Samples per generated fact (colours, days, months, legs, arithmetic): there are hundreds."""

REPEAT_SAMPLES = 40
"""'Say X again and again' samples; their answers repeat X with no end token (see `_repeat`)."""

REPEAT_WORDS_RANGE = (120, 200)
"""How many times a repeat answer says its word: longer than the demo's 256-token cap allows to end."""

PLAIN_SHARE = 0.2
"""Share of Q&A written as plain text (`<|bos|>Q A<|eos|>`) so raw completions answer too."""

SYSTEM_SHARES = (0.55, 0.4, 0.05)
"""No system prompt / a short one / a long stable one (sometimes led by volatile bytes).

Long ones are few: every untrained prompt token costs CPU time the answers need."""

FOLLOW_UP_SHARE = 0.1
"""Share of chat samples with an earlier question and answer in the history."""

LONG_SYSTEM_FACTS = (2, 6)
"""How many canonical answers a long system prompt restates (inclusive range)."""

LONG_SYSTEM_COPIES = (1, 2)
"""How many times a long system prompt repeats its text, as pasted policy prompts do."""

VOLATILE_SHARE = 0.5
"""Share of long system prompts led by a request ID and a timestamp, as in the demo."""

REPEAT_SYSTEM_SHARE = 0.5
"""Share of repeat requests that come with a system prompt."""

TOOL_LOOP_SAMPLES = 600
"""Tool-stage samples (`build_tool_corpus`) that start with a loop of the weather tool."""

TOOLS_IDLE_SAMPLES = 100
"""Tool-stage samples that start with an ordinary question asked with the tool offered, answered as without it."""

EXCHANGES = (2, 3, 4)
"""How many exchanges a tool-offering sample holds (drawn evenly): the listing, most of a sample's
tokens, then serves several, and the later ones learn from a history of calls and results."""

TOOL_STAGE_REPEATS = 80
"""Extra requests to repeat a word in the tool stage: the demo's looping prompt is a fragile
behaviour, and the many new answers pull its opening away."""

NO_TOOL_WEATHER_SAMPLES = 150
"""Tool-stage samples asking about the weather with no tool offered: the model must not call one."""

LATER_LOOP_SHARE = 0.7
"""Share of later exchanges that are a tool loop rather than an ordinary question."""

TOOL_SYSTEM_SHARE = 0.3
"""Share of tool-offering samples whose system turn starts with a short system prompt of the caller's."""


@dataclass(frozen=True, slots=True)
class Topic:
    """Paraphrases of one question and its canonical answer."""

    questions: tuple[str, ...]
    answer: str


INFERENCE_TOPICS = (
    Topic(
        (
            "What is prefill?",
            "What does prefill do?",
            "Explain prefill.",
            "What is the prefill phase?",
            "Can you explain prefill?",
            "Define prefill.",
            "Tell me about prefill.",
            "What happens during prefill?",
        ),
        "Prefill is one forward pass over the whole prompt. It stores keys and values for every prompt "
        "token and sets the time to first token.",
    ),
    Topic(
        (
            "What is decode?",
            "What does decode do?",
            "Explain decode.",
            "What is the decode phase?",
            "What is decoding?",
            "Define decode.",
            "Tell me about decode.",
            "What happens during decode?",
        ),
        "Decode produces one new token at a time after prefill. It sets the stream speed and is the "
        "expensive phase per token.",
    ),
    Topic(
        (
            "What is the difference between prefill and decode?",
            "Prefill vs decode?",
            "How do prefill and decode differ?",
            "What are the two phases of inference?",
            "Compare prefill and decode.",
        ),
        "Prefill reads the whole prompt in one pass and sets the time to first token. Decode then "
        "writes one token at a time and sets the stream speed.",
    ),
    Topic(
        (
            "What is TTFT?",
            "What does TTFT mean?",
            "What is time to first token?",
            "What sets the time to first token?",
            "Define TTFT.",
        ),
        "TTFT is the time to first token. Prefill sets it, so it grows with input length and shrinks with cache hits.",
    ),
    Topic(
        (
            "Why did TTFT spike?",
            "My TTFT jumped. What should I check?",
            "Why is the first token slow?",
            "What causes a TTFT spike?",
        ),
        "Check input length and cache hit rate before blaming the model. A longer or uncached prompt "
        "means a longer prefill.",
    ),
    Topic(
        (
            "TTFT jumped after I added a long policy to every request. Which phase?",
            "I added a 6,000-token policy and TTFT went up. Why?",
            "Which phase slows down when the prompt gets longer?",
        ),
        "Prefill. The first pass now covers a much longer prompt.",
    ),
    Topic(
        (
            "Why is the stream slow?",
            "Why are tokens arriving slowly?",
            "What sets the stream speed?",
            "The answer streams slowly. Which phase is it?",
        ),
        "A slow stream means you are on decode. Ask for shorter answers and cap the output tokens.",
    ),
    Topic(
        (
            "What is the KV cache?",
            "What is a KV cache?",
            "Explain the KV cache.",
            "What does the KV cache store?",
            "Tell me about the KV cache.",
            "Define the KV cache.",
        ),
        "The KV cache stores the keys and values of every layer for every token. Decode reuses them "
        "so the model does not re-encode the prompt for each new token.",
    ),
    Topic(
        (
            "How big is the KV cache?",
            "What is the KV cache formula?",
            "How much memory does the KV cache use?",
            "How do I compute KV cache size?",
            "How many bytes per token does the KV cache take?",
        ),
        "KV bytes ≈ 2 × layers × kv_heads × head_dim × bytes_per_elem × seq_len. The 2 counts keys and values.",
    ),
    Topic(
        (
            "How can I shrink the KV cache?",
            "Why do long contexts use so much memory?",
            "How do I make the KV cache smaller?",
            "What is grouped-query attention for?",
        ),
        "Long contexts blow up KV memory. Grouped-query attention and quantization exist largely to shrink it.",
    ),
    Topic(
        (
            "What is prefix caching?",
            "What is prompt caching?",
            "Explain prefix caching.",
            "How does prefix caching work?",
            "What is prefix reuse?",
            "Tell me about prompt caching.",
        ),
        "If two requests share a long identical prefix, the server reuses the keys and values it "
        "already computed for it. That is prefix caching, also called prompt caching.",
    ),
    Topic(
        (
            "What should go at the front of the prompt?",
            "How should I order my prompt?",
            "What is a stable prefix?",
            "How do I get more cache hits?",
            "How do I keep my prefix stable?",
        ),
        "Put stable things first: the system prompt, tool schemas and policy docs. Change them rarely "
        "and put dynamic content at the end.",
    ),
    Topic(
        (
            "Why does a request ID at the start of the system prompt raise the bill?",
            "Why is a timestamp in the system prompt bad?",
            "Why did my cache hit rate drop to zero?",
            "Why does a UUID at the start of the prompt break caching?",
            "What breaks the prompt cache?",
        ),
        "The prefix is no longer identical across calls, so the cache misses and you pay for a full prefill.",
    ),
    Topic(
        (
            "Where should I put a request ID?",
            "Where should dynamic content go?",
            "Where do timestamps belong in a prompt?",
            "Where should I put the date?",
        ),
        "At the end of the prompt, after the stable prefix. Request IDs, timestamps and other dynamic "
        "bytes should never lead.",
    ),
    Topic(
        (
            "What is a repetition loop?",
            "Why does the model repeat itself?",
            "Why does decode loop?",
            "What is a decode loop?",
            "Why is the model saying the same thing again and again?",
        ),
        "Decode keeps reinforcing recent tokens. They are fed back through the cache and amplified, so "
        "the model repeats itself.",
    ),
    Topic(
        (
            "How do I fix a repetition loop?",
            "How do I stop the model from repeating itself?",
            "How do I stop a loop?",
            "What fixes repetition?",
        ),
        "Use a repetition penalty, stop sequences, a lower max token cap and a clearer instruction.",
    ),
    Topic(
        (
            "Why are output tokens more expensive?",
            "Why do output tokens cost more than input tokens?",
            "Why is output priced higher?",
            "Why is decode expensive?",
        ),
        "Decode is expensive per token and harder to batch, and markets allow it. Verbose answers cost "
        "more and feel slower.",
    ),
    Topic(
        ("How do I lower my bill?", "How can I make calls cheaper?", "How do I save tokens?", "How do I reduce cost?"),
        "Keep the prefix stable so it hits the cache, ask for short answers and cap the output tokens.",
    ),
    Topic(
        ("What are common mistakes?", "What mistakes should I avoid?", "What are the usual mistakes?"),
        "Dynamic content at the start of the prompt, blaming the model for a TTFT spike, and asking "
        "for long answers when short ones would do.",
    ),
    Topic(
        ("What is the cache hit rate?", "What is a cache hit?", "What does cache hit ratio mean?"),
        "The share of input tokens read from the cache instead of being computed again in prefill.",
    ),
    Topic(
        ("What is a token?", "What are tokens?", "Define a token."),
        "A token is a small piece of text, often part of a word. Models read and write tokens.",
    ),
    Topic(
        ("What is kvwise?", "What does kvwise do?", "Tell me about kvwise."),
        "kvwise keeps prompt prefixes stable, guards decode and traces every call with OpenTelemetry.",
    ),
    Topic(
        ("What are the key takeaways?", "Summarize prefill and decode.", "Give me the short version."),
        "Prefill sets time to first token. Decode sets stream speed. Identical prefixes are cheap; "
        "dynamic bytes at the front are not.",
    ),
)

SMALL_TALK = (
    Topic(
        ("Hello!", "Hi!", "Hello", "Hi there!", "Hey!", "Good morning!", "Good evening!", "Hey there."),
        "Hello! How can I help you today?",
    ),
    Topic(
        ("How are you?", "How are you doing?", "How is it going?", "Are you well?"),
        "I am fine, thank you. How can I help?",
    ),
    Topic(
        ("Thank you!", "Thanks!", "Thanks a lot.", "Thank you very much.", "That helps, thanks."), "You are welcome!"
    ),
    Topic(("Goodbye!", "Bye!", "See you later.", "Good night!"), "Goodbye! Have a nice day."),
    Topic(
        ("Who are you?", "What is your name?", "What are you?", "Are you a bot?"),
        "I am the kvwise default model, a tiny assistant that answers short questions.",
    ),
    Topic(("Can you help me?", "I have a question.", "Can I ask you something?"), "Yes. Ask me a short question."),
    Topic(
        ("Tell me a joke.", "Say something funny.", "Do you know a joke?"),
        "Why did the prompt miss the cache? It started with a timestamp.",
    ),
    Topic(
        ("What can you do?", "What do you know?", "What can I ask you?"),
        "I answer short questions about prefill, decode and the KV cache, and simple everyday ones.",
    ),
    Topic(("How many days are in a week?", "How many days does a week have?"), "There are seven days in a week."),
    Topic(
        ("What are the days of the week?", "Name the days of the week."),
        "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday and Sunday.",
    ),
    Topic(
        ("How many months are in a year?", "How many months does a year have?"), "There are twelve months in a year."
    ),
    Topic(
        ("What are the colours of the rainbow?", "What colors are in a rainbow?"),
        "Red, orange, yellow, green, blue, indigo and violet.",
    ),
    Topic(("What is the capital of France?",), "Paris is the capital of France."),
    Topic(("What is the capital of Japan?",), "Tokyo is the capital of Japan."),
    Topic(("What is the capital of Italy?",), "Rome is the capital of Italy."),
    Topic(("How many hours are in a day?",), "There are twenty-four hours in a day."),
    Topic(("How many minutes are in an hour?",), "There are sixty minutes in an hour."),
    Topic(("What is water made of?",), "Water is made of hydrogen and oxygen."),
)

COLOURS = (
    ("the sky", "blue"),
    ("grass", "green"),
    ("snow", "white"),
    ("the sun", "yellow"),
    ("a banana", "yellow"),
    ("coal", "black"),
    ("a strawberry", "red"),
    ("an orange", "orange"),
    ("milk", "white"),
    ("a leaf", "green"),
    ("the sea", "blue"),
    ("a tomato", "red"),
    ("chocolate", "brown"),
    ("a lemon", "yellow"),
    ("blood", "red"),
    ("a cloud", "white"),
)
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
NUMBERS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")
ARITHMETIC_UP_TO = 6
"""Operands of the sums and differences: few enough facts for each to be seen many times."""
LEGS = (
    ("a dog", "four"),
    ("a cat", "four"),
    ("a bird", "two"),
    ("a spider", "eight"),
    ("an ant", "six"),
    ("a horse", "four"),
    ("a person", "two"),
    ("a fish", "no"),
)
REPEAT_WORDS = ("it", "cache", "token", "yes", "again", "la", "decode", "ok", "prefill", "that")
"""No greeting words: a greeting must never look like the start of a repeat."""
REPEAT_ASKS = (
    "Say {w} again and again.",
    "Repeat {w} forever.",
    "Keep saying {w}.",
    "Say {w} over and over.",
    "Say {w} again and again and again.",
)

SHORT_SYSTEMS = (
    "You are a helpful assistant.",
    "You answer briefly.",
    "Be concise.",
    "You answer questions about inference briefly.",
    "You are a friendly helper.",
    "Answer in one or two sentences.",
    "You are kvwise's helper.",
)
LONG_SYSTEM_OPENERS = (
    "You are kvwise's helper. You answer questions about LLM inference in one or two short sentences.",
    "You are a support assistant. Keep every answer short.",
    "You answer questions about serving language models. Be brief and exact.",
)
QUESTION_DRESS = (
    "{q}",
    "{q}",
    "{q}",
    "{l}",
    "Quick question: {q}",
    "Please tell me: {l}",
    "{q} Be brief.",
    "Hey, {l}",
    "{q} Answer in one sentence.",
    "{n}",
)
"""How a question may be worn: as written, lowercased ({l}), or without its question mark ({n})."""

Sample = list[tuple[str, bool]]


def fact_topics() -> list[Topic]:
    """Generated facts: colours, days, months, legs and small sums and differences."""
    topics = []
    for thing, colour in COLOURS:
        asks = tuple(t.format(thing) for t in ("What colour is {}?", "What color is {}?", "Which colour is {}?"))
        topics.append(Topic(asks, f"{thing[0].upper()}{thing[1:]} is {colour}."))
    for i, day in enumerate(DAYS):
        after, before = DAYS[(i + 1) % 7], DAYS[i - 1]
        topics.append(
            Topic((f"What day comes after {day}?", f"Which day follows {day}?"), f"{after} comes after {day}.")
        )
        topics.append(Topic((f"What day comes before {day}?",), f"{before} comes before {day}."))
    for i, month in enumerate(MONTHS):
        topics.append(
            Topic(
                (f"What month comes after {month}?", f"Which month follows {month}?"),
                f"{MONTHS[(i + 1) % 12]} comes after {month}.",
            )
        )
    for animal, legs in LEGS:
        topics.append(
            Topic((f"How many legs does {animal} have?",), f"{animal[0].upper()}{animal[1:]} has {legs} legs.")
        )
    for a in range(ARITHMETIC_UP_TO + 1):
        for b in range(ARITHMETIC_UP_TO + 1):
            words = (NUMBERS[a], NUMBERS[b])
            topics.append(
                Topic(
                    (f"What is {words[0]} plus {words[1]}?", f"What is {a} + {b}?"),
                    f"{words[0].capitalize()} plus {words[1]} is {NUMBERS[a + b]}.",
                )
            )
            if a >= b:
                topics.append(
                    Topic(
                        (f"What is {words[0]} minus {words[1]}?", f"What is {a} - {b}?"),
                        f"{words[0].capitalize()} minus {words[1]} is {NUMBERS[a - b]}.",
                    )
                )
    return topics


def build_corpus(seed: int) -> list[Sample]:
    """Every training sample, shuffled; the same `seed` gives the same list."""
    rng = random.Random(seed)
    samples = [_qa(rng, topic) for topic in INFERENCE_TOPICS for _ in range(TOPIC_REPEATS)]
    samples += [_qa(rng, topic) for topic in SMALL_TALK for _ in range(SMALL_TALK_REPEATS)]
    samples += [_qa(rng, topic) for topic in fact_topics() for _ in range(FACT_REPEATS)]
    samples += [_repeat(rng) for _ in range(REPEAT_SAMPLES)]
    rng.shuffle(samples)
    return samples


def build_tool_corpus(seed: int) -> list[Sample]:
    """The tool stage's samples, shuffled: tools offered, loops with them and ordinary questions."""
    rng = random.Random(seed)
    samples = [_with_tools(rng, loop_first=True) for _ in range(TOOL_LOOP_SAMPLES)]
    samples += [_with_tools(rng, loop_first=False) for _ in range(TOOLS_IDLE_SAMPLES)]
    samples += [_repeat(rng) for _ in range(TOOL_STAGE_REPEATS)]
    samples += [_render(tool_corpus.no_tool_weather(rng)) for _ in range(NO_TOOL_WEATHER_SAMPLES)]
    rng.shuffle(samples)
    return samples


def _dress(rng: random.Random, question: str) -> str:
    lower = question[0].lower() + question[1:] if not question.startswith(("TTFT", "KV", "I ")) else question
    return rng.choice(QUESTION_DRESS).format(q=question, l=lower, n=question.rstrip("?.!"))


def _qa(rng: random.Random, topic: Topic) -> Sample:
    question = _dress(rng, rng.choice(topic.questions))
    if rng.random() < PLAIN_SHARE:
        return [(BOS, False), (question + " " + topic.answer + EOS, True)]
    history: list[tuple[str, str]] = []
    if rng.random() < FOLLOW_UP_SHARE:
        earlier = rng.choice(INFERENCE_TOPICS + SMALL_TALK)
        history.append((rng.choice(earlier.questions), earlier.answer))
    return _chat(_system(rng), history + [(question, topic.answer)])


def _repeat(rng: random.Random) -> Sample:
    """A request to repeat a word, answered by repeating it with no end: the looping behaviour.

    The demo shows the loop guard cutting a runaway decode; a tiny model loops on requests like
    this one unless a guard stops it, and the training text keeps that behaviour deterministic.
    """
    word = rng.choice(REPEAT_WORDS)
    count = rng.randint(*REPEAT_WORDS_RANGE)
    answer = " ".join([word.capitalize()] + [word] * (count - 1))
    return _chat(
        _system(rng) if rng.random() < REPEAT_SYSTEM_SHARE else None,
        [(rng.choice(REPEAT_ASKS).format(w=word), answer)],
        closed=False,
    )


def _system(rng: random.Random) -> str | None:
    kind = rng.choices(range(3), weights=SYSTEM_SHARES)[0]
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice(SHORT_SYSTEMS)
    facts = " ".join(rng.sample([t.answer for t in INFERENCE_TOPICS], rng.randint(*LONG_SYSTEM_FACTS)))
    text = " ".join([rng.choice(LONG_SYSTEM_OPENERS) + " " + facts] * rng.randint(*LONG_SYSTEM_COPIES))
    if rng.random() < VOLATILE_SHARE:
        stamp = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=rng.randrange(10**8))
        request_id = uuid.UUID(int=rng.getrandbits(128), version=4)
        text = f"Request ID: {request_id}\nTimestamp: {stamp.isoformat(timespec='seconds')}\n{text}"
    return text


def _with_tools(rng: random.Random, loop_first: bool) -> Sample:
    """The weather tool offered, then a loop (or, unless `loop_first`, an ordinary question answered
    with no call), and more exchanges, each a loop or an ordinary question."""
    messages = _tool_system(rng) + (tool_corpus.tool_loop(rng) if loop_first else _ordinary(rng))
    for _ in range(1, rng.choice(EXCHANGES)):
        messages += tool_corpus.tool_loop(rng) if rng.random() < LATER_LOOP_SHARE else _ordinary(rng)
    return _render(fold(messages, [tool_corpus.WEATHER_TOOL]))


@cache
def _every_topic() -> tuple[Topic, ...]:
    return INFERENCE_TOPICS + SMALL_TALK + tuple(fact_topics())


def _ordinary(rng: random.Random) -> list[dict[str, Any]]:
    topic = rng.choice(_every_topic())
    return [
        {"role": "user", "content": _dress(rng, rng.choice(topic.questions))},
        {"role": "assistant", "content": topic.answer},
    ]


def _tool_system(rng: random.Random) -> list[dict[str, Any]]:
    return [{"role": "system", "content": rng.choice(SHORT_SYSTEMS)}] if rng.random() < TOOL_SYSTEM_SHARE else []


def _chat(system: str | None, turns: list[tuple[str, str]], closed: bool = True) -> Sample:
    """Render like `CHAT_TEMPLATE`; the turns are trained, the last answer unclosed unless `closed`."""
    messages = [{"role": "system", "content": system}] if system is not None else []
    for question, answer in turns:
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return _render(messages, closed)


def chat_text(turns: Sequence[Mapping[str, str]]) -> str:
    """The prompt `CHAT_TEMPLATE` renders for `turns` with the generation prompt (for probes)."""
    return "".join(text for text, _ in _render(turns)) + "\n<|assistant|>\n"


def _render(turns: Sequence[Mapping[str, str]], closed: bool = True) -> Sample:
    """Turns as `CHAT_TEMPLATE` writes them, one piece each: the system turn and tool results are not
    trained; the last turn loses its newline, and also its `<|end|>` unless `closed`."""
    pieces: Sample = [(BOS, False)]
    for turn in turns:
        trained = turn["role"] != "system" and not turn["content"].startswith(TOOL_RESPONSE_START)
        pieces.append((f"<|{turn['role']}|>\n{turn['content']}{END}\n", trained))
    last, trained = pieces[-1]
    pieces[-1] = (last.removesuffix("\n") if closed else last.removesuffix(f"{END}\n"), trained)
    return pieces
