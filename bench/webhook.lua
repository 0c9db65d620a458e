-- wrk script: POST Alertmanager version-4 webhooks of 20 alerts each, every
-- alert with a fingerprint never sent before (so each one is a new run).
-- BENCH_NONCE (4 hex digits) keeps fingerprints fresh across runs;
-- BENCH_TOKEN is sent as the bearer token.
local nonce = os.getenv("BENCH_NONCE") or "0000"
local token = os.getenv("BENCH_TOKEN") or ""
local per = 20
local threads = 0

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

local counter = 0
local starts = os.date("!%Y-%m-%dT%H:%M:%SZ")
local headers = { ["Content-Type"] = "application/json" }
if token ~= "" then headers["Authorization"] = "Bearer " .. token end

local function alert(fp, i)
  return string.format(
    '{"status":"firing","labels":{"alertname":"BenchAlert","instance":"10.0.%d.%d:8000",' ..
    '"model_name":"llama","severity":"page","bench":"%s"},"annotations":{"summary":"bench alert %s"},' ..
    '"startsAt":"%s","endsAt":"0001-01-01T00:00:00Z","generatorURL":"http://127.0.0.1:9090/graph",' ..
    '"fingerprint":"%s"}', i, counter % 250, fp, fp, starts, fp)
end

request = function()
  counter = counter + 1
  local alerts = {}
  for i = 1, per do
    alerts[i] = alert(string.format("%s%02x%08x%02x", nonce, tid, counter, i), i)
  end
  local body = '{"receiver":"autocapture","status":"firing","alerts":[' .. table.concat(alerts, ",") ..
    '],"groupLabels":{},"commonLabels":{"alertname":"BenchAlert"},"commonAnnotations":{},' ..
    '"externalURL":"http://127.0.0.1:9093","version":"4","groupKey":"{}:{alertname=\\"BenchAlert\\"}",' ..
    '"truncatedAlerts":0}'
  return wrk.format("POST", "/hooks/alertmanager", headers, body)
end

-- BENCH_DELAY_MS paces each connection (open-loop-ish): with c connections the
-- rate is about c * 1000 / (delay + latency) webhooks per second.
local pause = tonumber(os.getenv("BENCH_DELAY_MS") or "0")
if pause > 0 then
  delay = function() return pause end
end
