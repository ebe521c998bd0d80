// WanCore canvas extension: a failed validator's message marks only the inputs it names.
//
// ComfyUI attaches one validator message to every input the validator takes (execution.py: one
// "custom_validation_failed" error per input, the same details each), so "frames=80: must be 4n+1" turns width,
// height and batch_size red too. Our validators word each problem "name=value: ..." or "name: ..." (joined by
// "; "), so the errors of WanCore nodes are filtered to those whose input the message names, in the server's
// answer to the queue (before the frontend stores it as node_errors and marks the input slots).
import { api } from "../../scripts/api.js";

const NAMED = /(?:^|;\s+)([A-Za-z_][A-Za-z0-9_]*)[=:]/g;

// The inputs a validator message names ("width=830: ...; frames=80: ..." -> ["width", "frames"]; "model_name: ..."
// -> ["model_name"]).
export function namedInputs(message) {
  return [...String(message ?? "").matchAll(NAMED)].map((m) => m[1]);
}

// node_errors (the server's { id: { errors: [...], class_type, ... } }) with each WanCore node's validator errors
// kept only on the inputs their message names; anything else is left as it is. Returns the same object.
export function focusNodeErrors(nodeErrors) {
  if (!nodeErrors || typeof nodeErrors !== "object") return nodeErrors;
  for (const entry of Object.values(nodeErrors)) {
    if (!String(entry?.class_type ?? "").startsWith("WanCore") || !Array.isArray(entry.errors)) continue;
    const inputs = new Set(entry.errors.map((e) => e?.extra_info?.input_name).filter(Boolean));
    entry.errors = entry.errors.filter((e) => {
      const input = e?.extra_info?.input_name;
      if (e?.type !== "custom_validation_failed" || !input) return true;
      const details = String(e.details ?? "");
      const message = details.startsWith(`${input} - `) ? details.slice(input.length + 3) : details;
      const names = namedInputs(message).filter((n) => inputs.has(n)); // a message naming none: keep every mark
      return names.length === 0 || names.includes(input);
    });
  }
  return nodeErrors;
}

// Wrap api.queuePrompt: both its answer (node_errors with a prompt id) and its refusal (PromptExecutionError with
// response.node_errors) pass through focusNodeErrors before the frontend reads them.
const REGISTERED = Symbol.for("WanCore.errors.registered");
if (!globalThis[REGISTERED] && typeof api?.queuePrompt === "function") {
  globalThis[REGISTERED] = true;
  const queuePrompt = api.queuePrompt;
  api.queuePrompt = async function (...args) {
    try {
      const res = await queuePrompt.apply(this, args);
      focusNodeErrors(res?.node_errors);
      return res;
    } catch (err) {
      focusNodeErrors(err?.response?.node_errors);
      throw err;
    }
  };
}
