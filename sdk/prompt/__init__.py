"""The prompt step of a call: canonical order and the bytes that change between calls.

canonical    `canonicalize`: tiers in canonical order, one serialisation for the same content
volatile     `find_volatile`, `cut_volatile`: the bytes that change between calls, by their shape
dates        dates as products write them, and which of them say "now"
sentences    the caller's words a value moves with: its sentence, line or heading
first_sight  which volatile candidates move on the first call that carries them
families     `FamilyMemory`: which candidates change between calls of a prompt family
moving       `move_volatile`: cut volatile values from the system prompt into the context note
builder      `sdk.Prompt`: a prompt built in canonical order from the start
lint         `sdk.lint`: what would cost cache hits or decode tokens, found without sending
"""
