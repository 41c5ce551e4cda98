import Foundation

// Start-rate limits: the attempts of the operations that carry a tag start at most so many a
// second (`Configuration.startRateLimits`), by a token bucket per tag. A slot given to a due
// operation reserves a start of each of its limited tags (`rateReserved`), and takes it from the
// bucket when the slot starts (`slotDidStart`), not when it is given: slots queued in a suspended
// `OperationQueue` must not all start at once when it resumes. Reserving at the give keeps the
// starts in run order: slots are given in run order, but the `OperationQueue` starts them on
// several threads at once, in any order. A due operation one of whose buckets holds no start
// that is not reserved, when it would get a slot, is parked (as concurrency limits park: no
// slot, timer or retry spent; reported `queued`) in that tag's heap in run order, and a wake-up
// is set on `rateWakeQueue` for when the bucket holds one again: `asyncAfter` only queues a
// block, so it is set under the lock, and nothing runs there until the lock is let go. While
// the reservations alone fill the bucket's burst, refilling cannot free a start: no wake-up is
// set, and a reservation's slot sets it as it starts or leaves without starting (a suspended
// `OperationQueue` so sets no timer). The wake-up lets out as many parked operations, in run
// order, as the bucket holds unreserved starts. Entries forgotten while parked are skipped when
// their turn comes. Buckets are measured on the monotonic clock.

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

    /// The tags of `entry` that have a start-rate limit.
    func rateLimitedTags(of entry: Entry) -> [String] {
        let limits = configuration.startRateLimits
        guard !limits.isEmpty else { return [] }
        return entry.record.tags.filter { limits[$0] != nil }
    }

    /// Under the lock: when the bucket of a rate-limited tag of a due entry holds no start
    /// beyond those reserved, parks the entry for that tag (and sets the tag's wake-up);
    /// otherwise, when `starting` is its slot (the slot starts), the slot's reservations end and
    /// it takes a start from each bucket. Whether it parked the entry.
    func parkUnlessStartsLeft(_ entry: inout Entry, starting: AttemptSlot?, in state: inout State) -> Bool {
        let limits = configuration.startRateLimits
        guard !limits.isEmpty else { return false }
        if let starting { endReservations(of: starting, in: &state) }
        let limited = rateLimitedTags(of: entry)
        guard !limited.isEmpty else { return false }
        let now = DispatchTime.now().uptimeNanoseconds
        var buckets: [(tag: String, bucket: StartBucket)] = []
        for tag in limited {
            let limit = limits[tag]!
            var bucket = state.rateBuckets[tag] ?? StartBucket(starts: Double(limit.burst), refilledAt: now)
            bucket.refill(at: now, limit: limit)
            state.rateBuckets[tag] = bucket
            if bucket.starts - Double(state.rateReserved[tag, default: 0]) < 1 {
                park(&entry, in: \.rateWaiters, tag: tag, key: Self.rateKeyPrefix + tag, state: &state)
                armRateWake(for: tag, limit: limit, bucket: bucket, in: &state)
                return true
            }
            buckets.append((tag, bucket))
        }
        if starting != nil {
            for (tag, var bucket) in buckets {
                bucket.starts -= 1
                state.rateBuckets[tag] = bucket
                if state.rateWaiters[tag] != nil { armRateWake(for: tag, limit: limits[tag]!, bucket: bucket, in: &state) }
            }
        }
        return false
    }

    /// Under the lock: a slot just given reserves a start of each of its rate-limited tags
    /// (`parkUnlessStartsLeft` found one unreserved for each).
    func reserveStarts(for slot: AttemptSlot, in state: inout State) {
        guard !slot.rateLimitedTags.isEmpty else { return }
        for tag in slot.rateLimitedTags { state.rateReserved[tag, default: 0] += 1 }
        state.rateReservingSlots.insert(ObjectIdentifier(slot))
    }

    /// Under the lock: the reservations of a slot that starts, or leaves without starting, end.
    /// For one that leaves, its tags' parked operations get the freed starts (the caller fills
    /// the slots).
    func endReservations(of slot: AttemptSlot, leaving: Bool = false, in state: inout State) {
        guard state.rateReservingSlots.remove(ObjectIdentifier(slot)) != nil else { return }
        for tag in slot.rateLimitedTags {
            let count = state.rateReserved[tag, default: 1] - 1
            state.rateReserved[tag] = count > 0 ? count : nil
            guard leaving, state.rateWaiters[tag] != nil, let limit = configuration.startRateLimits[tag] else { continue }
            letOutParked(for: tag, limit: limit, in: &state)
        }
    }

    /// Under the lock: sets the wake-up of `tag` for when its bucket holds a start beyond those
    /// reserved, unless the reservations alone fill its burst (then the slot of one sets it as
    /// it starts or leaves).
    private func armRateWake(for tag: String, limit: StartRateLimit, bucket: StartBucket, alsoTaken taken: Int = 0, in state: inout State) {
        let reserved = state.rateReserved[tag, default: 0]
        guard reserved + 1 <= limit.burst else { return }
        let missing = Double(reserved + taken) + 1 - bucket.starts
        setRateWake(for: tag, after: max(missing, 0) / limit.startsPerSecond, in: &state)
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

    /// Under the lock: lets out as many operations parked for `tag` as its bucket holds
    /// unreserved starts, in run order, and sets the next wake-up if some still wait.
    private func letOutParked(for tag: String, limit: StartRateLimit, in state: inout State) {
        guard var bucket = state.rateBuckets[tag] else { return }
        bucket.refill(at: DispatchTime.now().uptimeNanoseconds, limit: limit)
        state.rateBuckets[tag] = bucket
        let available = bucket.starts - Double(state.rateReserved[tag, default: 0])
        let key = Self.rateKeyPrefix + tag
        var letOut = 0
        while Double(letOut) + 1 <= available, letOutNextParked(from: \.rateWaiters, tag: tag, key: key, state: &state) {
            letOut += 1
        }
        if state.rateWaiters[tag] != nil {
            // Still waiting: the next wake-up, when the bucket holds a start more than the
            // operations let out now take (they reserve theirs when they get their slots).
            armRateWake(for: tag, limit: limit, bucket: bucket, alsoTaken: letOut, in: &state)
        }
    }

    /// The wake-up of `tag`: lets out as many operations parked for it as its bucket holds
    /// unreserved starts, in run order, and gives them slots.
    private func rateWake(for tag: String) {
        guard let limit = configuration.startRateLimits[tag] else { return }
        let window = slotWindow()
        let slots = state.withLock { state -> [AttemptSlot] in
            state.rateWakes.remove(tag)
            guard !state.isClosed else { return [] }
            letOutParked(for: tag, limit: limit, in: &state)
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
        bucket.starts -= Double(state.rateReserved[tag, default: 0])
        return now.addingTimeInterval(bucket.secondsUntilAStart(limit: limit)) <= date
    }
}
