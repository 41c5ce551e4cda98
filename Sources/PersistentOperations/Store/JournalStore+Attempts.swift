import Foundation

// Attempt markers in the journal
// ==============================
//
// Crash-loop protection needs to know, at the next launch, which attempts started and never
// ended (see `RecordStore+CrashEvidence`). Each start is an attempt frame, written and not
// flushed: it has to survive a process crash or kill, which the page cache does, and a power
// cut merely forgets some evidence (a power cut is not a crash). The frame's body is text:
//
//     <record id> <attempts> <crashes> <kills> <alone>
//
// `attempts` 0 ends the record's attempts. A removal or a move to the failed area ends them
// too, without a frame of its own: the common lifecycle (add, attempt, success) writes one
// attempt frame and no other. Replaying the journal rebuilds the markers; compaction copies
// the markers of the segments it merges, by the same ordering rule as records.

extension JournalStore {
    /// Notes that `marker` describes the attempts of pending record `id` in flight, or with
    /// `nil` that none is (an attempt frame, written and not flushed). Clearing a record that
    /// has no marker writes nothing.
    ///
    /// - Throws: ``PersistenceError/Code/recordNotFound`` when no pending record has this
    ///   identifier (setting only), ``PersistenceError/Code/writeFailed``,
    ///   ``PersistenceError/Code/storeNotWritable``.
    package func setAttemptMarker(_ marker: AttemptMarker?, forRecord id: String) throws {
        guard let uuid = Self.uuid(id) else { throw PersistenceError(.recordNotFound, "No pending record has the identifier \(id).") }
        if marker == nil, state.withLock({ $0.attempts[uuid] == nil }) { return }
        let frame = JournalFrame(kind: .attempt, body: Self.attemptBody(uuid, marker))
        try append(frame, flushes: false, schedulesFlush: false) { state in
            if marker != nil, state.index.entries[uuid]?.area != .pending {
                throw PersistenceError(.recordNotFound, "No pending record has the identifier \(id).")
            }
            if marker != nil, state.isShortOfSpace {
                throw PersistenceError(
                    .writeFailed,
                    "The disk is full: the start of the attempt was not recorded (crash-loop protection resumes once space is freed), so that removals of completed work have room."
                )
            }
        } apply: { state, segment, _, _ in
            if let marker {
                state.attempts[uuid] = (marker, segment)
            } else {
                state.attempts[uuid] = nil
            }
        }
    }

    /// Ends the attempts of every record in `ids` (best effort: a marker left behind only
    /// makes crash-loop protection more cautious).
    package func clearAttemptMarkers(_ ids: some Sequence<String>) {
        for id in ids { try? setAttemptMarker(nil, forRecord: id) }
    }

    /// The attempt markers of pending records, by record identifier.
    package func attemptMarkers() -> [String: AttemptMarker] {
        state.withLock { state in
            var markers: [String: AttemptMarker] = [:]
            for (id, attempt) in state.attempts where state.index.entries[id]?.area == .pending {
                markers[id.uuidString] = attempt.marker
            }
            return markers
        }
    }

    /// The body of an attempt frame.
    static func attemptBody(_ id: UUID, _ marker: AttemptMarker?) -> Data {
        let marker = marker ?? AttemptMarker(attempts: 0)
        return Data("\(id.uuidString) \(marker.attempts) \(marker.crashes) \(marker.kills) \(marker.runsAlone ? 1 : 0)".utf8)
    }

    /// The record and marker an attempt frame's body names (a marker of 0 attempts: `nil`).
    static func attemptMarker(fromBody body: Data) throws -> (id: UUID, marker: AttemptMarker?) {
        let fields = String(decoding: body, as: UTF8.self).split(separator: " ", omittingEmptySubsequences: false)
        guard fields.count == 5, let id = uuid(String(fields[0])) else {
            throw PersistenceError(.corruptRecord, "the body is not an attempt marker")
        }
        let numbers = fields.dropFirst().map { Int($0) }
        guard let attempts = numbers[0], let crashes = numbers[1], let kills = numbers[2], let alone = numbers[3],
              attempts >= 0, crashes >= 0, kills >= 0, alone == 0 || alone == 1 else {
            throw PersistenceError(.corruptRecord, "the body is not an attempt marker")
        }
        guard attempts > 0 else { return (id, nil) }
        return (id, AttemptMarker(attempts: attempts, crashes: crashes, kills: kills, runsAlone: alone == 1))
    }
}
