import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// Crash evidence: what a launch that died leaves for the next one to tell which operation, if
// any, crashed it.
//
//   attempts/<id>.attempt   an attempt of <id> started in this launch and has not ended: a hard
//                           link to the record (the first attempt, no crash on file: the common
//                           case costs one link), or the text `<attempts> <crashes>`
//   attempts/<id>.suspect   left by a launch that died: `<attempts> <crashes> <alone>` — the
//                           attempts that started and never ended, the crashes attributed to
//                           <id>, and whether its next attempt must run alone
//   attempts/launch         `witness on` or `witness off`, then `crashed <signal>` appended by
//                           the crash-signal witness if the launch crashed, then `evaluated`
//                           once the next launch has turned the markers into suspects
//
// At open, `beginLaunch` reads the markers the last launch left: the attempts that were in
// flight when it died. It was a crash if the witness saw a crash signal; a kill (SIGKILL, as
// the OS kills apps) if the witness was on and saw none; either, if there was no witness. A
// death that may have been a crash, with exactly one attempt in flight, is that operation's
// crash; with several in flight, each of them must next run alone, with nothing else in
// flight, so that a crash singles one out. A kill blames nobody. The markers become suspect
// files (each written whole, by rename), the launch file is marked `evaluated` (a second open
// after a crash between these steps does not count the same death twice), the markers are
// removed, and a new launch file starts. None of these files is synced: they have to survive
// a process crash, which the page cache does; a power cut merely forgets some evidence.

/// What a launch that died left about one record whose attempts never ended.
package struct CrashSuspect: Sendable, Equatable {
    /// Attempts that started and never ended, over consecutive launches that died.
    package var interruptedAttempts: Int
    /// Launches that crashed while an attempt of this record was the only one in flight.
    package var crashes: Int
    /// Whether its next attempt must run alone (it was in flight at a crash beside others, or
    /// crashes were attributed to it).
    package var runsAlone: Bool

    package init(interruptedAttempts: Int, crashes: Int, runsAlone: Bool) {
        self.interruptedAttempts = interruptedAttempts
        self.crashes = crashes
        self.runsAlone = runsAlone
    }
}

/// How the launch before this one ended, as far as its attempts in flight are concerned.
package enum PreviousLaunchEnding: Sendable, Equatable {
    /// No attempt was in flight when it ended (or nothing is known of it).
    case noAttemptsInFlight
    /// It died with attempts in flight and the witness saw this crash signal.
    case crashed(signal: Int32)
    /// It died with attempts in flight and the witness saw no crash signal: it was killed.
    case killed
    /// It died with attempts in flight and had no witness: a crash or a kill.
    case unwitnessed
}

extension RecordStore {
    static let suspectExtension = "suspect"
    static let launchFileName = "launch"

    /// Turns the attempt markers the last launch left into suspects (see the file comment) and
    /// starts this launch's launch file. With `witness`, returns a descriptor of that file open
    /// for appending, for ``CrashSignalWitness``; the caller closes it.
    ///
    /// - Throws: ``PersistenceError`` only when the store is closed; a file that cannot be
    ///   written (a full disk) leaves the evidence as it is, for `restore()` to read cautiously.
    package func beginLaunch(witness: Bool) throws -> (ending: PreviousLaunchEnding, descriptor: Int32?) {
        let change = try beginChange()
        defer { change.end() }
        let launchPath = layout.path(ofEntry: Self.launchFileName, in: .attempts)
        let lines = launchFileLines(at: launchPath)
        let markers = attemptMarkers()
        var ending = PreviousLaunchEnding.noAttemptsInFlight
        if !markers.isEmpty {
            if let signal = lines?.compactMap({ $0.hasPrefix("crashed ") ? Int32($0.dropFirst(8)) : nil }).first {
                ending = .crashed(signal: signal)
            } else if lines?.contains("witness on") == true {
                ending = .killed
            } else {
                ending = .unwitnessed
            }
        }
        do {
            if !markers.isEmpty, lines?.contains("evaluated") != true {
                let mayBeCrash = ending != .killed
                for (id, marker) in markers {
                    var suspect = CrashSuspect(interruptedAttempts: marker.attempts, crashes: marker.crashes, runsAlone: marker.crashes > 0)
                    if mayBeCrash {
                        // No launch file at all: a power cut lost it (it is not synced), and a
                        // power cut is not a crash. Its attempts run alone; no crash is counted.
                        if markers.count == 1, lines != nil { suspect.crashes += 1 }
                        suspect.runsAlone = true
                    }
                    try writeSuspect(suspect, forRecord: id)
                }
                let evaluated = (lines ?? []) + ["evaluated"]
                try writeLaunchFile(evaluated, at: launchPath)
            }
            for id in markers.keys {
                try? configuration.fileSystem.unlink(attemptMarkerPath(id))
            }
            try writeLaunchFile([witness ? "witness on" : "witness off"], at: launchPath)
        } catch {
            // A full disk, say: the store still opens. Without a launch file the next launch
            // runs the attempts this one had in flight alone, counting no crash (it reads as
            // a power cut), and `restore()` reads the markers left here as suspects that run
            // alone: cautious, and nothing is lost.
            try? configuration.fileSystem.unlink(launchPath)
            return (ending, nil)
        }
        guard witness else { return (ending, nil) }
        let descriptor = try? configuration.fileSystem.open(launchPath, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW, DurableFile.filePermissions)
        return (ending, descriptor)
    }

    /// Notes in the launch file that this launch has no witness after all (see
    /// ``CrashSignalWitness/register(_:)``), so that its death counts as a possible crash.
    package func noteNoWitness() {
        guard let change = try? beginChange() else { return }
        defer { change.end() }
        try? writeLaunchFile(["witness off"], at: layout.path(ofEntry: Self.launchFileName, in: .attempts))
    }

    /// The suspects earlier launches left, by record identifier. Unreadable or malformed
    /// suspect files read as one interrupted attempt that runs alone.
    package func suspects() -> [String: CrashSuspect] {
        var suspects: [String: CrashSuspect] = [:]
        for (id, path) in attemptEntries(withExtension: Self.suspectExtension) {
            var suspect = CrashSuspect(interruptedAttempts: 1, crashes: 0, runsAlone: true)
            if case .contents(let data)? = try? file.read(path, maximumSize: 64) {
                let fields = String(decoding: data, as: UTF8.self).split(separator: " ").compactMap { Int($0) }
                if fields.count == 3, fields[0] >= 0, fields[1] >= 0 {
                    suspect = CrashSuspect(interruptedAttempts: fields[0], crashes: fields[1], runsAlone: fields[2] != 0)
                }
            }
            suspects[id] = suspect
        }
        return suspects
    }

    /// What the attempt markers and suspect files say of each record that has one: the
    /// attempts started and not ended (an attempt running in this launch, or interrupted by an
    /// earlier one), the crashes on file, and whether its next attempt runs alone. A marker
    /// supersedes its record's suspect file (the attempt started after it was written).
    package func attemptEvidence() -> [String: CrashSuspect] {
        var evidence = suspects()
        for (id, marker) in attemptMarkers() {
            evidence[id] = CrashSuspect(interruptedAttempts: marker.attempts, crashes: marker.crashes, runsAlone: false)
        }
        return evidence
    }

    /// Removes the suspect file of record `id`, if any (best effort, like a marker).
    package func clearSuspect(forRecord id: String) {
        guard let change = try? beginChange() else { return }
        defer { change.end() }
        try? configuration.fileSystem.unlink(suspectPath(id))
    }

    /// The attempt markers: attempts started and crashes carried, by record identifier.
    /// Markers without a count (links to the record, empty or unreadable files) count as one
    /// attempt and no crash; a lone number (an earlier version's marker) as that many attempts.
    func attemptMarkers() -> [String: (attempts: Int, crashes: Int)] {
        var markers: [String: (attempts: Int, crashes: Int)] = [:]
        for (id, path) in attemptEntries(withExtension: Self.attemptMarkerExtension) {
            var marker = (attempts: 1, crashes: 0)
            if case .contents(let data)? = try? file.read(path, maximumSize: 32) {
                let fields = String(decoding: data, as: UTF8.self).split(separator: " ").compactMap { Int($0) }
                if let attempts = fields.first, attempts > 0 { marker.attempts = attempts }
                if fields.count > 1, fields[1] > 0 { marker.crashes = fields[1] }
            }
            markers[id] = marker
        }
        return markers
    }

    private func attemptEntries(withExtension fileExtension: String) -> [(id: String, path: String)] {
        let suffix = "." + fileExtension
        let names = (try? configuration.fileSystem.contentsOfDirectory(layout.path(of: .attempts))) ?? []
        return names.compactMap { name in
            guard name.hasSuffix(suffix) else { return nil }
            let id = String(name.dropLast(suffix.count))
            guard OperationRecord.isValidIdentifier(id) else { return nil }
            return (id, layout.path(ofEntry: name, in: .attempts))
        }
    }

    private func writeSuspect(_ suspect: CrashSuspect, forRecord id: String) throws {
        let text = "\(suspect.interruptedAttempts) \(suspect.crashes) \(suspect.runsAlone ? 1 : 0)"
        let path = suspectPath(id)
        do {
            try file.replaceContents(of: path, with: Data(text.utf8), synchronizes: false)
        } catch {
            throw writeFailed("Could not record an operation in flight when the last launch ended.", path: path, error: error)
        }
    }

    private func launchFileLines(at path: String) -> [String]? {
        guard case .contents(let data)? = try? file.read(path, maximumSize: 4096) else { return nil }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
    }

    private func writeLaunchFile(_ lines: [String], at path: String) throws {
        do {
            try file.replaceContents(of: path, with: Data(lines.map { $0 + "\n" }.joined().utf8), synchronizes: false)
        } catch {
            throw writeFailed("Could not write the launch file of crash-loop protection.", path: path, error: error)
        }
    }

    func suspectPath(_ id: String) -> String {
        layout.path(ofEntry: id + "." + Self.suspectExtension, in: .attempts)
    }
}
