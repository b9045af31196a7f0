-- POST /v1/categories with a name no other request has used: petstore
-- answers 409 to a repeated name, which would measure the wrong path.
-- RUN_PREFIX (set per wrk run by run.sh) keeps runs on one database apart.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

local prefix = os.getenv("RUN_PREFIX")
if not prefix then
   math.randomseed(os.time())
   prefix = tostring(math.random(1, 1e9))
end

local threads = 0
function setup(thread)
   threads = threads + 1
   thread:set("tid", threads)
end

-- IDEM=1 sends each request with an Idempotency-Key of its own (its name),
-- for row 9: what storing the answers costs.
local idem = os.getenv("IDEM") == "1"

-- REPLAY=1 sends one request again and again, with one Idempotency-Key:
-- the first creates, every other is a replay (bench/farpg.sh).
local replay = os.getenv("REPLAY") == "1"

local n = 0
function request()
   n = n + 1
   if replay then
      idem = true
      n = 1
   end
   local name = string.format("p%s-t%d-%d", prefix, tid, n)
   local body = string.format('{"name":"%s","description":"posted by wrk"}', name)
   if idem then
      local headers = {}
      for k, v in pairs(wrk.headers) do
         headers[k] = v
      end
      headers["Idempotency-Key"] = name
      return wrk.format(nil, nil, headers, body)
   end
   return wrk.format(nil, nil, nil, body)
end

-- DELAY_MS paces each connection: a write every DELAY_MS ms, for a mixed
-- load beside a GET run (see BENCHMARKS.md, "GETs while writes come in").
local delay_ms = tonumber(os.getenv("DELAY_MS") or "")
if delay_ms then
   function delay()
      return delay_ms
   end
end
