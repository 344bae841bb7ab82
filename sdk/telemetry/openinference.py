"""Call and outcome -> OpenInference span attributes, the flavour Arize Phoenix reads (pure functions).

They go on the call span beside the GenAI ones from `attributes.py`, mapped from the same facts, so
Phoenix lists the call as an LLM span with its tokens, cache reads and cost:

    openinference.span.kind    LLM
    llm.model_name             gen_ai.response.model, else gen_ai.request.model
    llm.provider, llm.system   from gen_ai.provider.name and the client's API family
    llm.token_count.prompt     gen_ai.usage.input_tokens (all of them, cached included)
    llm.token_count.completion gen_ai.usage.output_tokens;  .total = prompt + completion
    llm.token_count.prompt_details.cache_read / .cache_write   the cache counts
    llm.cost.prompt            input + cached input + cache write USD;  .completion = output USD
    llm.cost.prompt_details.input / .cache_read / .cache_write   the prompt cost split;
                               .cache_input = cache_read + cache_write (what went through the cache)
    llm.finish_reason          the first of gen_ai.response.finish_reasons
"""

from __future__ import annotations

from sdk.call import Call, Provider
from sdk.telemetry import semconv as sc
from sdk.telemetry.attributes import Attributes, Outcome

_LLM = sc.OpenInferenceSpanKind.LLM.value
_OPENAI_SYSTEM, _ANTHROPIC_SYSTEM = sc.LlmSystem.OPENAI.value, sc.LlmSystem.ANTHROPIC.value
_PROVIDERS: dict[str, str] = {
    sc.ProviderName.OPENAI.value: sc.LlmProvider.OPENAI.value,
    sc.ProviderName.ANTHROPIC.value: sc.LlmProvider.ANTHROPIC.value,
    sc.ProviderName.AWS_BEDROCK.value: sc.LlmProvider.AWS.value,
    sc.ProviderName.GCP_VERTEX_AI.value: sc.LlmProvider.GOOGLE.value,
    sc.ProviderName.AZURE_AI_INFERENCE.value: sc.LlmProvider.AZURE.value,
    sc.ProviderName.AZURE_AI_OPENAI.value: sc.LlmProvider.AZURE.value,
    sc.ProviderName.DEEPSEEK.value: sc.LlmProvider.DEEPSEEK.value,
    sc.ProviderName.GCP_GEMINI.value: sc.LlmProvider.GOOGLE.value,
    sc.ProviderName.GROQ.value: sc.LlmProvider.GROQ.value,
    sc.ProviderName.MISTRAL_AI.value: sc.LlmProvider.MISTRALAI.value,
    sc.ProviderName.MOONSHOT_AI.value: sc.LlmProvider.MOONSHOT.value,
    sc.ProviderName.PERPLEXITY.value: sc.LlmProvider.PERPLEXITY.value,
    sc.ProviderName.X_AI.value: sc.LlmProvider.XAI.value,
}
"""`gen_ai.provider.name` -> `llm.provider` (the two conventions spell some providers differently)."""


def request_attributes(call: Call, provider: str) -> Attributes:
    """Attributes known before sending: span kind, provider, API family and the requested model."""
    attributes: Attributes = {
        sc.OPENINFERENCE_SPAN_KIND: _LLM,
        sc.LLM_PROVIDER: _PROVIDERS.get(provider, provider),
        sc.LLM_SYSTEM: _ANTHROPIC_SYSTEM if call.provider is Provider.ANTHROPIC else _OPENAI_SYSTEM,
    }
    if call.model:
        attributes[sc.LLM_MODEL_NAME] = call.model
    return attributes


def outcome_attributes(outcome: Outcome) -> Attributes:
    """Attributes known at the end: the answering model, token counts and cost (see the module table)."""
    attributes: Attributes = {}
    if outcome.response_model:
        attributes[sc.LLM_MODEL_NAME] = outcome.response_model
    if outcome.finish_reasons:
        attributes[sc.LLM_FINISH_REASON] = outcome.finish_reasons[0]
    usage = outcome.usage
    if usage is not None:
        attributes[sc.LLM_TOKEN_COUNT_PROMPT] = usage.input_tokens
        attributes[sc.LLM_TOKEN_COUNT_COMPLETION] = usage.output_tokens
        attributes[sc.LLM_TOKEN_COUNT_TOTAL] = usage.input_tokens + usage.output_tokens
        attributes[sc.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_READ] = usage.cache_read_tokens
        attributes[sc.LLM_TOKEN_COUNT_PROMPT_DETAILS_CACHE_WRITE] = usage.cache_write_tokens
        if usage.reasoning_tokens:
            attributes[sc.LLM_TOKEN_COUNT_COMPLETION_DETAILS_REASONING] = usage.reasoning_tokens
    cost = outcome.cost
    if cost is not None:
        attributes[sc.LLM_COST_TOTAL] = cost.total_usd
        attributes[sc.LLM_COST_PROMPT] = cost.input_usd + cost.cached_input_usd + cost.cache_write_usd
        attributes[sc.LLM_COST_COMPLETION] = cost.output_usd
        attributes[sc.LLM_COST_PROMPT_DETAILS_INPUT] = cost.input_usd
        attributes[sc.LLM_COST_PROMPT_DETAILS_CACHE_READ] = cost.cached_input_usd
        attributes[sc.LLM_COST_PROMPT_DETAILS_CACHE_WRITE] = cost.cache_write_usd
        attributes[sc.LLM_COST_PROMPT_DETAILS_CACHE_INPUT] = cost.cached_input_usd + cost.cache_write_usd
    return attributes
