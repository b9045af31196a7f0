-- limits_redis.lua: one request's rate-limit step on Redis, atomic because
-- Redis runs a script alone. It is limits.go's allowKey in Lua: the same
-- token bucket, day count, refusal window and ban, in microseconds instead
-- of nanoseconds so that every number stays an exact integer in Lua's
-- doubles (a bucket of 100,000,000 per minute holds 6e15 units < 2^53).
--
-- KEYS[1]  the hash of one key's (or one address's) state
-- ARGV     now (µs; 0: Redis's own clock), rpm, rpd (0: that window is
--          unlimited), floor, floorDay (a count of day floorDay the caller
--          knows of, from the database: a Redis that lost its data takes
--          it back), knownBan (µs; the ban the caller knows of, from the
--          database: 0 for none), threshold (refusals within a minute that
--          ban; 0: never, and no refusals are kept), banFor (µs)
-- Returns  {allowed, code, tokens, last, count, day, banUntil, now, bannedNow}
--          code: 0 allowed, 1 rate_limited, 2 quota_exceeded, 3 key_banned;
--          tokens in units of 1/60,000,000 token, times in µs, day in days
--          since 1970-01-01 (UTC).

local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local rpm, rpd = tonumber(ARGV[2]), tonumber(ARGV[3])
local floor, floorDay = tonumber(ARGV[4]), tonumber(ARGV[5])
local knownBan = tonumber(ARGV[6])
local threshold, banFor = tonumber(ARGV[7]), tonumber(ARGV[8])
local UNIT = 60000000 -- one token; also one minute in µs
local DAY = 86400000000
-- A ban here holds while the caller knows it too (the database is the
-- record of bans, and "keys unban" lifts them there), or for GRACE after
-- the script imposed it: the time the database takes to tell every
-- instance.
local GRACE = 2000000
local SLACK = 1000000 -- a stored ban may have lost its sub-second digits

local s = redis.call('HMGET', KEYS[1], 't', 'l', 'r', 'd', 'c', 'b', 'rs', 'rf', 'pr', 'bs')
local tokens, last, cap = tonumber(s[1]) or 0, tonumber(s[2]) or 0, tonumber(s[3]) or 0
local day, count, ban = tonumber(s[4]) or 0, tonumber(s[5]) or 0, tonumber(s[6]) or 0
local refStart, refusals, prev = tonumber(s[7]) or 0, tonumber(s[8]) or 0, tonumber(s[9]) or 0
local banStart = tonumber(s[10]) or 0

local function int(x) return string.format('%.0f', x) end

-- expire keeps the state only while it says something: until the bucket is
-- full again, the day is over, the ban has ended, the refusals are old.
local function save()
  local ttl = 0
  if cap > 0 then ttl = math.ceil((cap * UNIT - tokens) / cap) end
  if count > 0 then ttl = math.max(ttl, (day + 1) * DAY - now) end
  if ban > now then ttl = math.max(ttl, ban - now) end
  if refusals > 0 or prev > 0 then ttl = math.max(ttl, 2 * UNIT - (now - refStart)) end
  redis.call('HSET', KEYS[1], 't', int(tokens), 'l', int(last), 'r', int(cap), 'd', int(day),
    'c', int(count), 'b', int(ban), 'rs', int(refStart), 'rf', int(refusals), 'pr', int(prev),
    'bs', int(banStart))
  redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) + 1000)
end

local function refill(r)
  if now <= last then return end -- a clock that steps back earns nothing
  local gap = now - last
  if gap >= UNIT or gap * r >= r * UNIT - tokens then
    tokens = r * UNIT
  else
    tokens = tokens + gap * r
  end
  last = now
end

if knownBan > ban + SLACK then
  ban, banStart = knownBan, 0 -- Redis lost it, or the database has a later one
elseif ban > now and knownBan < ban - SLACK and now - banStart >= GRACE then
  ban, banStart = 0, 0 -- lifted in the database (or never written there)
end
if ban > now then
  save()
  return {0, 3, 0, 0, 0, 0, ban, now, 0}
end

-- The bucket's capacity follows the plan: a fresh bucket starts full; on
-- a plan change the tokens already spent stay spent.
if rpm ~= cap then
  if cap == 0 then
    tokens, last = rpm * UNIT, now
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

local minuteOK = rpm == 0 or tokens >= UNIT
local dayOK = rpd == 0 or count < rpd
if minuteOK and dayOK then
  if rpm > 0 then tokens = tokens - UNIT end
  -- Without a day quota (an address) there is nothing to count for: not
  -- counting lets the state expire with the bucket.
  if rpd > 0 then count = count + 1 end
  save()
  return {1, 0, tokens, last, count, day, 0, now, 0}
end

-- Refused: consumes nothing, counts towards a ban. Refusals are counted
-- in windows of a minute, the one before weighted by how much of it the
-- last minute still covers.
if threshold == 0 then
  save()
  return {0, 1, tokens, last, count, day, 0, now, 0}
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
  return {0, 3, 0, 0, 0, 0, ban, now, 1}
end
save()
local code = 1
if not dayOK then code = 2 end
return {0, code, tokens, last, count, day, 0, now, 0}
