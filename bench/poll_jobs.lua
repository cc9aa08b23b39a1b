-- wrk script for bench/load_test.py --poller wrk: GET /v1/jobs/{id} of random ids read from
-- the file named by the first script argument; prints the figures as one JSON line at the end.
local ids = {}

function init(args)
  for line in io.lines(args[1]) do ids[#ids + 1] = line end
  math.randomseed(os.time() + tonumber(tostring(ids):sub(-6), 16))
end

function request()
  return wrk.format("GET", "/v1/jobs/" .. ids[math.random(#ids)])
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "non_2xx": %d, "socket_errors": %d, "p50_us": %d, "p99_us": %d, "max_us": %d}\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
