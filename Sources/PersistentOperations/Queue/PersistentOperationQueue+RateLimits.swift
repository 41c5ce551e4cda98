import Foundation

// Start-rate limits: the attempts of the operations that carry a tag start at most so many a
// second (`Configuration.startRateLimits`), by a token bucket per tag. An attempt takes a start
// from the bucket of each limited tag of its operation when its slot starts (`slotDidStart`),
// not when the slot is given: slots queued in a suspended `OperationQueue` must not all start
// at once when it resumes. A due operation one of whose buckets is empty, when it would get a
// slot or when its slot starts, is parked (as concurrency limits park: no slot, timer or retry
// spent; reported `queued`) in that tag's heap in run order, and a wake-up is set on
// `rateWakeQueue` for when the bucket holds a start again: `asyncAfter` only queues a block, so
// it is set under the lock, and nothing runs there until the lock is let go. The wake-up lets
// out as many parked operations, in run order, as the bucket holds starts; each takes its start
// when its slot starts, and one that finds the bucket empty again (another operation took the
// start first) is parked again and sets the next wake-up. Entries forgotten while parked are
// skipped when their turn comes. Buckets are measured on the monotonic clock.

/// The starts a tag's bucket holds, as of `refilledAt` (monotonic nanoseconds).
struct StartBucket: Sendable {
    var starts: Double
    var refilledAt: UInt64

    /// The bucket as of `now`: it gains `limit.startsPerSecond` a second, up to `limit.burst`.
    mutating func refill(at now: UInt64, limit: StartRateLimit) {
        guard now > refilledAt else { return }
        starts = min(Double(limit.burst), starts + Double(now - refilledAt) / 1e9 * limit.startsPerSecond)
        refilledAt = now
    }

    /// Seconds until the bucket holds one start (0 when it does).
    func secondsUntilAStart(limit: StartRateLimit) -> Double {
        starts >= 1 ? 0 : (1 - starts) / limit.startsPerSecond
    }
}

extension PersistentOperationQueue {
    /// The prefix of the keys under which operations wait for a start of a rate-limited tag.
    static let rateKeyPrefix = "\u{1}rate:"

    /// Under the lock: when the bucket of a rate-limited tag of a due entry is empty, parks the
    /// entry for that tag (and sets the tag's wake-up); otherwise, when `taking` (its slot
    /// starts), takes a start from each. Whether it parked the entry.
    func parkUnlessStartsLeft(_ entry: inout Entry, taking: Bool, in state: inout State) -> Bool {
        let limits = configuration.startRateLimits
        guard !limits.isEmpty else { return false }
        let limited = entry.record.tags.filter { limits[$0] != nil }
        guard !limited.isEmpty else { return false }
        let now = DispatchTime.now().uptimeNanoseconds
        var buckets: [(tag: String, bucket: StartBucket)] = []
        for tag in limited {
            let limit = limits[tag]!
            var bucket = state.rateBuckets[tag] ?? StartBucket(starts: Double(limit.burst), refilledAt: now)
            bucket.refill(at: now, limit: limit)
            if bucket.starts < 1 {
                state.rateBuckets[tag] = bucket
                park(&entry, in: \.rateWaiters, tag: tag, key: Self.rateKeyPrefix + tag, state: &state)
                setRateWake(for: tag, after: bucket.secondsUntilAStart(limit: limit), in: &state)
                return true
            }
            buckets.append((tag, bucket))
        }
        for (tag, var bucket) in buckets {
            if taking { bucket.starts -= 1 }
            state.rateBuckets[tag] = bucket
        }
        return false
    }

    /// Under the lock: sets the wake-up of `tag` in `seconds`, unless one is set.
    private func setRateWake(for tag: String, after seconds: Double, in state: inout State) {
        guard state.rateWakes.insert(tag).inserted else { return }
        // (Rounded up to a whole microsecond, so that the bucket holds its start when it runs.)
        let microseconds = Int((seconds * 1e6).rounded(.up)) + 1
        rateWakeQueue.asyncAfter(deadline: .now() + .microseconds(microseconds)) { [weak self] in
            self?.rateWake(for: tag)
        }
    }

    /// The wake-up of `tag`: lets out as many operations parked for it as its bucket holds
    /// starts, in run order, and gives them slots.
    private func rateWake(for tag: String) {
        guard let limit = configuration.startRateLimits[tag] else { return }
        let window = slotWindow()
        let slots = state.withLock { state -> [AttemptSlot] in
            state.rateWakes.remove(tag)
            guard !state.isClosed, var bucket = state.rateBuckets[tag] else { return [] }
            bucket.refill(at: DispatchTime.now().uptimeNanoseconds, limit: limit)
            state.rateBuckets[tag] = bucket
            let key = Self.rateKeyPrefix + tag
            var letOut = 0
            while Double(letOut) + 1 <= bucket.starts, letOutNextParked(from: \.rateWaiters, tag: tag, key: key, state: &state) {
                letOut += 1
            }
            if state.rateWaiters[tag] != nil {
                // Still waiting: the next wake-up, when the bucket holds a start more than the
                // operations let out now take (they take theirs when their slots start).
                setRateWake(for: tag, after: (Double(letOut) + 1 - bucket.starts) / limit.startsPerSecond, in: &state)
            }
            return fillSlots(in: &state, window: window)
        }
        for slot in slots {
            operationQueue.addOperation(slot)
        }
        noteRunProgress()
    }

    /// Under the lock: whether an entry parked for a start of a rate-limited tag gets one by
    /// `date` (a bounded run must not end while it waits for nothing but that).
    func startsByRate(_ entry: Entry, by date: Date, now: Date, in state: State) -> Bool {
        guard let key = entry.parkedUnder, key.hasPrefix(Self.rateKeyPrefix) else { return false }
        let tag = String(key.dropFirst(Self.rateKeyPrefix.count))
        guard let limit = configuration.startRateLimits[tag] else { return false }
        var bucket = state.rateBuckets[tag] ?? StartBucket(starts: Double(limit.burst), refilledAt: 0)
        bucket.refill(at: DispatchTime.now().uptimeNanoseconds, limit: limit)
        return now.addingTimeInterval(bucket.secondsUntilAStart(limit: limit)) <= date
    }
}
