#!/usr/bin/env python3
"""Print the first rollout of a `starter export` file: its reward, token
counts and its first turns (standard library only)."""
import json
import sys

TURNS = 2


def short(text, n=90):
    text = (text or "").replace("\n", " ")
    return text if len(text) <= n else text[: n - 1] + "…"


def main(path):
    with open(path, encoding="utf-8") as f:
        line = f.readline()
    if not line:
        sys.exit(f"{path}: empty export")
    r = json.loads(line)
    msgs = r.get("messages", [])
    gens = [m for m in msgs if m.get("role") == "assistant"]
    prompt = sum(len(m.get("prompt_token_ids") or []) for m in gens)
    out = sum(len(m.get("generation_token_ids") or []) for m in gens)
    print(f"rollout {r['rollout_id']} ({r['env']}): reward {r.get('reward')}, {r.get('num_turns')} turns, "
          f"tokens {r.get('tokens')}: {prompt} prompt ids and {out} generated ids with log-probs over {len(gens)} calls")
    for t in r.get("turns", [])[:TURNS]:
        a = msgs[t["assistant"]]
        calls = ", ".join(c["function"]["name"] + c["function"]["arguments"] for c in a.get("tool_calls") or [])
        print(f"  turn {t['turn']}: assistant {short(a.get('content') or calls)}"
              f" [{len(a.get('generation_token_ids') or [])} ids, first log-probs {(a.get('generation_log_probs') or [])[:3]}]")
        for i in t.get("observations", []):
            print(f"           {msgs[i]['role']}: {short(msgs[i].get('content'))}")


if __name__ == "__main__":
    main(sys.argv[1])
