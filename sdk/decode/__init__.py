"""The decode step of a call: the decode limits put on the request, and the guard that cuts a stream.

limits         `apply_limits`: the cap (decided once, `Call.cap`), stop sequences, penalties;
               `fit_to_context`: a filled cap fits a context the policy or a server's refusal named
adaptive_caps  `AdaptiveCaps`: a cap learnt per prompt family from its own answers
loop_guard     `LoopDetector`: a streamed decode that has started to loop
repetition     whether a repeating unit reads as records (on purpose) or prose (a loop)
"""
