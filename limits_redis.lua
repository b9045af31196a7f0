-- limits_redis.lua: one step of a key's (or an address's) rate limits on
-- Redis, atomic because Redis runs a script alone. It is limits.go's
-- allowKey in Lua: the same token bucket, day count, refusal window and
-- ban, in microseconds instead of nanoseconds so that every number stays an
-- exact integer in Lua's doubles (a bucket of 100,000,000 per minute holds
-- 6e15 units < 2^53); and beside it the leases (DECISIONS.md section 23):
-- tokens of the bucket and units of the day quota that an instance took
-- ahead, recorded here, each with an expiry of at most a second.
--
-- KEYS[1]  the hash of one key's (or one address's) state
-- ARGV     now (µs; 0: Redis's own clock), rpm, rpd (0: that window is
--          unlimited), floor, floorDay (a count of day floorDay the caller
--          knows of, from the database: a Redis that lost its data takes
--          it back), knownBan (µs; the ban the caller knows of, from the
--          database: 0 for none), threshold (refusals within a minute that
--          ban; 0: never, and no refusals are kept), banFor (µs);
--          then, all optional: take (1, the default: decide one request;
--          0: only the lease), inst (the calling instance's lease name;
--          "": no lease), held (the tokens of its lease it has not spent;
--          -1: leave the lease alone), want (the lease it asks for, in
--          all; 0 ends it and returns what it held), life (µs, at most 1 s)
-- Returns  {allowed, code, tokens, last, count, day, banUntil, now,
--          bannedNow, alive, granted, leased}
--          code: 0 allowed, 1 rate_limited, 2 quota_exceeded, 3 key_banned,
--          4 lease only (take 0); tokens in units of 1/60,000,000 token,
--          times in µs, day in days since 1970-01-01 (UTC); alive: 1 when
--          the caller's lease was still recorded (else what it held is
--          void); granted: tokens added to its lease; leased: the tokens of
--          every instance's lease, its own included, after the step.
--
-- A lease's tokens left the bucket (and its units were counted on the
-- day) when it was granted, so a request an instance admits from it is
-- already paid for. The bucket refills only up to the capacity less every
-- recorded lease: bucket plus leases never exceed it. A lease that is not
-- renewed within its life is dropped here and its tokens count as spent
-- (the bucket refills into their room); the instance stops spending it
-- before then (it counts the life from before its call was sent).

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local rpm, rpd = tonumber(ARGV[2]), tonumber(ARGV[3])
local floor, floorDay = tonumber(ARGV[4]), tonumber(ARGV[5])
local knownBan = tonumber(ARGV[6])
local threshold, banFor = tonumber(ARGV[7]), tonumber(ARGV[8])
local take = tonumber(ARGV[9] or '1')
local inst = ARGV[10] or ''
local held, want = tonumber(ARGV[11] or '-1'), tonumber(ARGV[12] or '0')
local life = math.min(tonumber(ARGV[13] or '0'), 1000000)
local UNIT = 60000000 -- one token; also one minute in µs
local DAY = 86400000000
-- A ban here holds while the caller knows it too (the database is the
-- record of bans, and "keys unban" lifts them there), or for GRACE after
-- the script imposed it: the time the database takes to tell every
-- instance.
local GRACE = 2000000
local SLACK = 1000000 -- a stored ban may have lost its sub-second digits

local all = redis.call('HGETALL', KEYS[1])
local f = {}
for i = 1, #all, 2 do f[all[i]] = all[i + 1] end
local tokens, last, cap = tonumber(f.t) or 0, tonumber(f.l) or 0, tonumber(f.r) or 0
local day, count, ban = tonumber(f.d) or 0, tonumber(f.c) or 0, tonumber(f.b) or 0
local refStart, refusals, prev = tonumber(f.rs) or 0, tonumber(f.rf) or 0, tonumber(f.pr) or 0
local banStart = tonumber(f.bs) or 0

-- The leases: field L:<instance> = "tokens:expiry:day". Expired ones go;
-- others counts the live ones of the other instances.
local mine = 'L:' .. inst
local others, gone = 0, {}
local myN, myExp, myDay, alive = 0, 0, 0, 0
for k, v in pairs(f) do
  if string.sub(k, 1, 2) == 'L:' then
    local n, e, d = string.match(v, '^(%d+):(%d+):(%d+)$')
    n, e, d = tonumber(n), tonumber(e), tonumber(d)
    if not n or e <= now then
      table.insert(gone, k)
    elseif inst ~= '' and k == mine then
      myN, myExp, myDay, alive = n, e, d, 1
    else
      others = others + n
    end
  end
end
local leasing = inst ~= '' and held >= 0
local returned = 0
if leasing and alive == 1 then
  -- What the caller spent since it last said leaves the record.
  myN = math.min(myN, held)
end

local function int(x) return string.format('%.0f', x) end

-- expire keeps the state only while it says something: until the bucket is
-- full again, the day is over, the ban has ended, the refusals are old, a
-- lease has expired.
local function save()
  local ttl = 0
  if cap > 0 then ttl = math.ceil((cap * UNIT - tokens) / cap) end
  if count > 0 then ttl = math.max(ttl, (day + 1) * DAY - now) end
  if ban > now then ttl = math.max(ttl, ban - now) end
  if refusals > 0 or prev > 0 then ttl = math.max(ttl, 2 * UNIT - (now - refStart)) end
  if others > 0 or myN > 0 then ttl = math.max(ttl, 1000000) end
  redis.call('HSET', KEYS[1], 't', int(tokens), 'l', int(last), 'r', int(cap), 'd', int(day),
    'c', int(count), 'b', int(ban), 'rs', int(refStart), 'rf', int(refusals), 'pr', int(prev),
    'bs', int(banStart))
  if inst ~= '' and alive == 1 and myN == 0 then table.insert(gone, mine) end
  if #gone > 0 then redis.call('HDEL', KEYS[1], unpack(gone)) end
  if inst ~= '' and myN > 0 then
    redis.call('HSET', KEYS[1], mine, int(myN) .. ':' .. int(myExp) .. ':' .. int(myDay))
  end
  redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) + 1000)
end

-- room is the most the bucket of r may hold: its capacity less the leases.
local function room(r)
  return math.max(0, (r - others - myN) * UNIT)
end

local function refill(r)
  if now <= last then return end -- a clock that steps back earns nothing
  local gap, top = now - last, room(r)
  if tokens < top then
    if gap >= UNIT or gap * r >= top - tokens then
      tokens = top
    else
      tokens = tokens + gap * r
    end
  end
  last = now
end

local function answer(allowed, code, granted, bannedNow)
  local leased = others + myN
  if code == 3 then
    return {0, 3, 0, 0, 0, 0, ban, now, bannedNow, alive, 0, leased}
  end
  return {allowed, code, tokens, last, count, day, 0, now, 0, alive, granted, leased}
end

if knownBan > ban + SLACK then
  ban, banStart = knownBan, 0 -- Redis lost it, or the database has a later one
elseif ban > now and knownBan < ban - SLACK and now - banStart >= GRACE then
  ban, banStart = 0, 0 -- lifted in the database (or never written there)
end
if ban > now then
  -- A banned key's lease is void: the record stays until it expires (the
  -- caller may spend what it holds while this answer travels).
  save()
  alive = 0
  return answer(0, 3, 0, 0)
end

-- The bucket's capacity follows the plan: a fresh bucket starts full; on
-- a plan change the tokens already spent stay spent.
if rpm ~= cap then
  if cap == 0 then
    tokens, last = room(rpm), now
  else
    refill(cap)
    tokens = math.max(0, math.min(rpm * UNIT, tokens + (rpm - cap) * UNIT))
  end
  cap = rpm
end
if rpm > 0 then refill(rpm) end

local today = math.floor(now / DAY)
if today > day then day, count = today, 0 end
if rpd > 0 and floorDay == day and floor > count then count = floor end

-- A lease that ends gives back what its instance had not spent: to the
-- bucket (within its room) and to the day (if it is still the day it was
-- counted on).
if leasing and want <= 0 and myN > 0 then
  returned = myN
  myN = 0
  if rpm > 0 then tokens = math.min(room(rpm), tokens + returned * UNIT) end
  if rpd > 0 and myDay == day then count = math.max(0, count - returned) end
end

-- grant tops the caller's lease up towards want: from what the bucket and
-- the day hold, at most an eighth of the bucket's capacity (and of what
-- the day has left), never below what it holds.
local function grant()
  if not leasing or want <= myN then return 0 end
  local w = want
  if rpm > 0 then w = math.min(w, math.floor(rpm / 8)) end
  if rpd > 0 then w = math.min(w, math.floor(math.max(0, rpd - count) / 8) + myN) end
  local g = w - myN
  if rpm > 0 then g = math.min(g, math.floor(tokens / UNIT)) end
  if rpd > 0 then g = math.min(g, rpd - count) end
  if g <= 0 then return 0 end
  if rpm > 0 then tokens = tokens - g * UNIT end
  if rpd > 0 then count = count + g end
  if myN == 0 then myDay = day end
  myN, myExp = myN + g, now + life
  return g
end

if take == 0 then
  local g = grant()
  if leasing and myN > 0 then myExp = now + life end
  save()
  return answer(0, 4, g, 0)
end

local minuteOK = rpm == 0 or tokens >= UNIT
local dayOK = rpd == 0 or count < rpd
if minuteOK and dayOK then
  if rpm > 0 then tokens = tokens - UNIT end
  -- Without a day quota (an address) there is nothing to count for: not
  -- counting lets the state expire with the bucket.
  if rpd > 0 then count = count + 1 end
  local g = grant()
  if leasing and myN > 0 then myExp = now + life end
  save()
  return answer(1, 0, g, 0)
end

-- Refused: consumes nothing, counts towards a ban. Refusals are counted
-- in windows of a minute, the one before weighted by how much of it the
-- last minute still covers.
if leasing and myN > 0 then myExp = now + life end
if threshold == 0 then
  save()
  return answer(0, 1, 0, 0)
end
local elapsed = now - refStart
if (refusals == 0 and prev == 0) or elapsed >= 2 * UNIT or elapsed < 0 then
  refStart, refusals, prev = now, 0, 0
elseif elapsed >= UNIT then
  refStart, prev, refusals = refStart + UNIT, refusals, 0
end
refusals = refusals + 1
local recent = prev * math.max(0, 1 - (now - refStart) / UNIT) + refusals
if threshold > 0 and recent > threshold then
  ban, banStart, refStart, refusals, prev = now + banFor, now, 0, 0, 0
  save()
  alive = 0
  return answer(0, 3, 0, 1)
end
save()
local code = 1
if not dayOK then code = 2 end
return answer(0, code, 0, 0)
