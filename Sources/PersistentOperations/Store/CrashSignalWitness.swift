import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// The crash-signal witness: tells a crash from a kill at the next launch.
//
// A process that crashes receives a signal it can catch (SIGSEGV, SIGBUS, SIGILL, SIGTRAP,
// SIGFPE, SIGABRT: a bad access, a Swift runtime trap, `abort()`); a process that is killed
// from outside — SIGKILL from the OS, from a debugger, from a user swiping the app away —
// receives one nobody can catch. The witness installs a handler for the crash signals, once
// per process, that appends `crashed <signal>` to the launch file of every open store
// (`attempts/launch`, see `RecordStore+CrashEvidence`) and then hands the signal on: to the
// handler that was installed before (a crash reporter, the Swift runtime's backtracer),
// or, when there was none, to the default action, so the process still dies as it would have.
//
// The handler is async-signal-safe: it takes no lock, allocates nothing and touches no Swift
// object. It reads fixed tables, allocated once when the witness is installed, and calls
// `write(2)`, `sigaction(2)` and `raise(3)` only. The descriptors it writes to sit in a fixed
// table of 32-bit slots, changed under a lock by registering stores and read by the handler
// without one (an aligned 32-bit store is never seen half done).

/// The process-wide crash-signal witness. Stores register the descriptor of their launch file
/// while they are open.
enum CrashSignalWitness {
    /// The signals a crash raises.
    static let crashSignals: [Int32] = [SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE, SIGABRT]

    /// How many stores can be open with a witness at a time; more are opened without one
    /// (their launches count every death as a possible crash, as without a witness).
    static let capacity = 1024

    /// Installs the handlers (once per process) and registers `descriptor`, which must be
    /// open for appending. Returns `false` when no slot is free.
    static func register(_ descriptor: Int32) -> Bool {
        installOnce
        return slotsLock.withLock {
            for index in 0..<capacity where tables.descriptors[index] == -1 {
                tables.descriptors[index] = descriptor
                return true
            }
            return false
        }
    }

    /// Stops writing to `descriptor`; the caller closes it afterwards.
    static func unregister(_ descriptor: Int32) {
        slotsLock.withLock {
            for index in 0..<capacity where tables.descriptors[index] == descriptor {
                tables.descriptors[index] = -1
                return
            }
        }
    }

    private static let slotsLock = NSLock()

    // MARK: - Tables read by the handler

    /// Everything the handler reads, allocated once and never freed.
    private struct Tables: @unchecked Sendable {
        // @unchecked: the pointers are written before any handler is installed, then only read,
        // except the slots of `descriptors`, written under `slotsLock`.
        let descriptors: UnsafeMutablePointer<Int32>
        /// The action that was installed before the witness, for each signal number.
        let previous: UnsafeMutablePointer<sigaction>
        /// `crashed <n>\n` for each signal number, and its length.
        let lines: UnsafeMutablePointer<UInt8>
        static let lineLength = 16
        static let signalCount = 65
    }

    private static let tables: Tables = {
        let descriptors = UnsafeMutablePointer<Int32>.allocate(capacity: capacity)
        descriptors.initialize(repeating: -1, count: capacity)
        let previous = UnsafeMutablePointer<sigaction>.allocate(capacity: Tables.signalCount)
        previous.initialize(repeating: sigaction(), count: Tables.signalCount)
        let lines = UnsafeMutablePointer<UInt8>.allocate(capacity: Tables.signalCount * Tables.lineLength)
        lines.initialize(repeating: 0, count: Tables.signalCount * Tables.lineLength)
        for signal in 0..<Tables.signalCount {
            let text = Array("crashed \(signal)\n".utf8)
            for (offset, byte) in text.enumerated() { lines[signal * Tables.lineLength + offset] = byte }
        }
        return Tables(descriptors: descriptors, previous: previous, lines: lines)
    }()

    private static let installOnce: Void = {
        let previous = tables.previous
        for signal in crashSignals {
            var action = sigaction()
            setHandler(of: &action, to: witnessHandler)
            action.sa_flags = SA_SIGINFO | SA_ONSTACK
            sigemptyset(&action.sa_mask)
            sigaction(signal, &action, previous + Int(signal))
        }
    }()

    /// The handler: witness, then pass the signal on.
    private static let witnessHandler: @convention(c) (Int32, UnsafeMutablePointer<siginfo_t>?, UnsafeMutableRawPointer?) -> Void = { signal, info, context in
        let tables = CrashSignalWitness.tables
        guard signal > 0, Int(signal) < Tables.signalCount else { return }
        let line = tables.lines + Int(signal) * Tables.lineLength
        var length = 0
        while length < Tables.lineLength, line[length] != 0 { length += 1 }
        for index in 0..<CrashSignalWitness.capacity {
            let descriptor = tables.descriptors[index]
            if descriptor >= 0 { _ = write(descriptor, line, length) }
        }
        let previous = tables.previous[Int(signal)]
        let address = CrashSignalWitness.handlerAddress(of: previous)
        if address > 1 {
            // A handler was there before: call it as it expects to be called. If it returns,
            // returning re-executes a faulting instruction, which raises the signal again.
            if previous.sa_flags & SA_SIGINFO != 0 {
                let handler = unsafeBitCast(address, to: (@convention(c) (Int32, UnsafeMutablePointer<siginfo_t>?, UnsafeMutableRawPointer?) -> Void).self)
                handler(signal, info, context)
            } else {
                let handler = unsafeBitCast(address, to: (@convention(c) (Int32) -> Void).self)
                handler(signal)
            }
            return
        }
        // The default action (or "ignore"): put it back. A fault raises the signal again when
        // the instruction re-executes; a signal sent by `raise`, `abort` or `kill` is sent again.
        var restored = previous
        sigaction(signal, &restored, nil)
        if info == nil || CrashSignalWitness.isSent(info!) { raise(signal) }
    }

    private static func isSent(_ info: UnsafeMutablePointer<siginfo_t>) -> Bool {
        info.pointee.si_code <= 0
    }

    // The handler field of `sigaction` is a union whose Swift name differs between C libraries.

    private static func handlerAddress(of action: sigaction) -> UInt {
        #if canImport(Glibc)
        return unsafeBitCast(action.__sigaction_handler.sa_handler, to: UInt.self)
        #else
        return unsafeBitCast(action.__sigaction_u.__sa_handler, to: UInt.self)
        #endif
    }

    private static func setHandler(of action: inout sigaction, to handler: @escaping @convention(c) (Int32, UnsafeMutablePointer<siginfo_t>?, UnsafeMutableRawPointer?) -> Void) {
        #if canImport(Glibc)
        action.__sigaction_handler.sa_sigaction = handler
        #else
        action.__sigaction_u.__sa_sigaction = handler
        #endif
    }
}

/// One open store's registration with the ``CrashSignalWitness``: the descriptor of its launch
/// file, written to by the handler until ``end()``.
final class WitnessRegistration: Sendable {
    private let descriptor: Locked<Int32?>

    /// Registers `descriptor` (open for appending), or, when the witness has no free slot,
    /// closes it and notes in the launch file that this launch has no witness.
    init(descriptor: Int32, store: RecordStore) {
        if CrashSignalWitness.register(descriptor) {
            self.descriptor = Locked(descriptor)
        } else {
            _ = close(descriptor)
            store.noteNoWitness()
            self.descriptor = Locked(nil)
        }
    }

    /// Unregisters and closes the descriptor; later calls do nothing.
    func end() {
        guard let descriptor = descriptor.withLock({ value -> Int32? in defer { value = nil }; return value }) else { return }
        CrashSignalWitness.unregister(descriptor)
        _ = close(descriptor)
    }
}
