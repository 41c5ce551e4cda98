import Foundation

// Idempotency keys.
//
// The store owns what is known of a key: the records that hold it (its index reads the key of
// every record, also those an earlier launch left, before `restore()`) and the keys of removed
// records it still remembers (retire frames, see `JournalFrame+Retire.swift`). An add with a
// key asks the store and stores its records with the key in the same write, so the queue keeps
// no table of its own. What it keeps is which keys adds are storing at this instant
// (`KeyReservations`): two adds of one key at once must not both find it unknown, and an add
// of another key must not wait for them.

extension PersistentOperationQueue {
    /// The longest idempotency key, in bytes of UTF-8.
    static let maximumIdempotencyKeyLength = 1024

    /// Throws ``PersistenceError/Code/invalidOptions`` for an idempotency key that is empty or
    /// longer than ``maximumIdempotencyKeyLength`` bytes.
    static func checkIdempotencyKey(_ key: String) throws {
        guard key.isEmpty || key.utf8.count > maximumIdempotencyKeyLength else { return }
        throw PersistenceError(
            .invalidOptions,
            "EnqueueOptions.idempotencyKey must be 1 to \(maximumIdempotencyKeyLength) bytes of UTF-8; this one has \(key.utf8.count). Nothing was stored."
        )
    }

    /// Runs `add` with `key` reserved, unless the store knows the key: then returns what
    /// `existing` makes of the records that hold or held it (by enqueue sequence), and stores
    /// nothing. Without a key, runs `add`.
    ///
    /// - Throws: ``PersistenceError/Code/invalidOptions`` for an empty or too long key (or a
    ///   store of the earlier layout), and what `add` throws.
    func withIdempotencyKey<T>(_ key: String?, existing: ([String]) -> T, add: () throws -> T) throws -> T {
        guard let key else { return try add() }
        try Self.checkIdempotencyKey(key)
        idempotencyKeysBeingAdded.reserve(key)
        defer { idempotencyKeysBeingAdded.release(key) }
        let ids = try store.records(withIdempotencyKey: key)
        if !ids.isEmpty { return existing(ids) }
        return try add()
    }
}

/// Keys that are reserved one holder at a time: ``reserve(_:)`` waits while another thread
/// holds the key. Its lock is held only to look at and change the set, never with another lock
/// or around other code.
final class KeyReservations: @unchecked Sendable {
    // @unchecked: `reserved` is only touched while `condition` is locked.
    private let condition = NSCondition()
    private var reserved: Set<String> = []

    /// Takes `key`, waiting while another thread holds it.
    func reserve(_ key: String) {
        condition.lock()
        defer { condition.unlock() }
        while reserved.contains(key) { condition.wait() }
        reserved.insert(key)
    }

    /// Gives `key` back and wakes the threads waiting for a key.
    func release(_ key: String) {
        condition.lock()
        defer { condition.unlock() }
        reserved.remove(key)
        condition.broadcast()
    }
}
