import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Crash-loop protection needs to know, at the next launch, how many attempts of a record
// started and never ended. In a journal store that is an attempt frame (see
// `JournalStore+Attempts`). In the earlier layout (and in stores an earlier version left
// markers in, until their next open), an attempt marker `attempts/<id>.attempt` holds that count as
// decimal text (`<attempts> <crashes> <kills> <alone>`, see `+CrashEvidence`); any other marker (a hard link to
// the record, or an empty file) means one attempt and no crash. Markers are renamed into place
// but not synced: they only have to survive a process crash (the case crash-loop protection is about), and losing one to a power cut
// merely forgets how many crashes an operation caused. The record itself is never rewritten
// at an attempt's start, so a marker can never damage it.

extension RecordStore {
    static let attemptMarkerExtension = "attempt"

    /// Records that `count` attempts of record `id` have started without ending, that
    /// `crashes` crashes and `kills` kills are attributed to it, and whether this attempt runs
    /// alone (see `+CrashEvidence`).
    package func setAttemptsInFlight(_ count: Int, crashes: Int = 0, kills: Int = 0, runsAlone: Bool = false, forRecord id: String) throws {
        let change = try beginChange()
        defer { change.end() }
        let path = attemptMarkerPath(id)
        if count <= 0 {
            clearAttemptsInFlight(forRecord: id)
            return
        }
        if let journal {
            try journal.setAttemptMarker(AttemptMarker(attempts: count, crashes: crashes, kills: kills, runsAlone: runsAlone), forRecord: id)
            return
        }
        do {
            if count == 1 && crashes == 0 && kills == 0 && !runsAlone {
                try markOneAttempt(forRecord: id, at: path)
            } else {
                let text = "\(count) \(crashes) \(kills) \(runsAlone ? 1 : 0)"
                try file.replaceContents(of: path, with: Data(text.utf8), synchronizes: false)
            }
        } catch {
            try checkAreaExists(.attempts)
            throw writeFailed("Could not write the attempt marker.", path: path, error: error)
        }
    }

    /// Removes the attempt marker of record `id`, if any (best effort: a leftover marker only
    /// makes crash-loop protection more cautious). Does nothing once the store is closed.
    package func clearAttemptsInFlight(forRecord id: String) {
        guard let change = try? beginChange() else { return }
        defer { change.end() }
        if let journal {
            // A marker file is one an earlier version left; the next open removes it.
            journal.clearAttemptMarkers([id])
            return
        }
        try? configuration.fileSystem.unlink(attemptMarkerPath(id))
    }

    /// The attempts started and never ended of every record that has a marker or a suspect
    /// file (an attempt that started in this launch, or one an earlier launch left).
    package func attemptsInFlight() -> [String: Int] {
        attemptEvidence().mapValues(\.interruptedAttempts)
    }

    /// Marks one attempt in flight — every operation's first attempt, so the common case —
    /// without creating a file: the marker is a second name (a hard link) for the record
    /// file itself. Creating an inode costs a file system far more than adding a name (on
    /// ext4 a new inode is searched for among recently freed ones), and an operation's
    /// lifecycle already creates one, for its record. The marker reads as one attempt: its
    /// contents are not a decimal count. Where links are not possible, an empty file is
    /// created instead, which reads as one too.
    private func markOneAttempt(forRecord id: String, at path: String) throws {
        let fileSystem = configuration.fileSystem
        let recordPath = layout.path(ofRecord: id, in: .pending)
        do {
            // A journal's records have no file to link to.
            guard journal == nil else { throw SystemCallError("link", path: recordPath, code: ENOENT) }
            try fileSystem.link(recordPath, path)
            return
        } catch let error as SystemCallError where error.code == EEXIST {
            // A marker from an earlier count: replace it.
            try? fileSystem.unlink(path)
            if (try? fileSystem.link(recordPath, path)) != nil { return }
        } catch {
            // No links here (or the record is being replaced this instant): fall back.
        }
        let descriptor = try fileSystem.open(path, O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, DurableFile.filePermissions)
        try fileSystem.close(descriptor)
    }

    func attemptMarkerPath(_ id: String) -> String {
        layout.path(ofEntry: id + "." + Self.attemptMarkerExtension, in: .attempts)
    }
}
