"""Parameter counts from a model's config fields: total (memory) and active (compute).

One function per formula. Every count is the number of tensors' elements in the
published checkpoint of that architecture, read off the Hugging Face `transformers`
modelling code for the family (the module that builds each weight), so the counts
are exact integers rather than the rounded "8B" of a model card. Biases and norm
weights are counted; rotary tables are buffers, not parameters, and are not.

Conventions shared by all formulas:
- `active` is what one token's forward pass touches: everything except the routed
  experts it is not sent to. The embedding table and the LM head are included in
  both, as models.csv's `params_*_computed_B` columns do (the roofline's
  `2 × active_params` FLOPs per token slightly overstates a lookup table; that is
  deliberate and small).
- A gated MLP (SwiGLU / GeGLU: gate, up, down projections, no bias) has
  `3 × hidden × intermediate` weights.

Modules: `blocks` (the pieces: embeddings, attention blocks, MLPs, the routed split),
`dense` (dense decoders: Llama, Mistral, Qwen2/3, Gemma 2/3) and `moe` (routed-expert
decoders: Mixtral, Qwen3-MoE, DeepSeek-V2/V3, Llama 4, gpt-oss, GLM-4.5+, and the
Qwen3-Next / Qwen3.5 hybrids, dense or MoE).
"""
